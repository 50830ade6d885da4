"""Laravel's ``Encrypter``: the format of ``ShouldBeEncrypted`` job commands (and of encrypted cookies).

An encrypted value is ``base64(json)`` where the JSON (written with ``JSON_UNESCAPED_SLASHES``) is
``{"iv": b64, "value": b64, "mac": hex, "tag": b64}``:

* AES-128-CBC / AES-256-CBC: PKCS#7 padding, a 16-byte random IV, ``mac`` = lowercase hex
  HMAC-SHA256 over the *base64 texts* ``iv + value`` keyed with the encryption key, ``tag`` empty;
* AES-128-GCM / AES-256-GCM: a 12-byte random IV, no additional data, a 16-byte ``tag``, ``mac`` empty.

With ``serialize`` (Laravel's default) the plaintext is PHP's ``serialize()`` of the string, i.e.
``s:<byte length>:"...";`` — a queued encrypted job therefore decrypts to ``s:N:"O:...";``.

Decryption validates the structure, checks the MAC (constant time, before decrypting) or the GCM tag,
and tries ``previous_keys`` after the current key (``APP_PREVIOUS_KEYS``, 11.x+). Every failure is a
:class:`DecryptError` whose message never includes key material.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from collections.abc import Sequence

from laraq.protocol.phpjson import json_loads

__all__ = ["DecryptError", "EncryptError", "Encrypter", "SUPPORTED_CIPHERS", "parse_app_key"]

#: cipher name → (key length in bytes, is AEAD)
SUPPORTED_CIPHERS: dict[str, tuple[int, bool]] = {
    "aes-128-cbc": (16, False),
    "aes-256-cbc": (32, False),
    "aes-128-gcm": (16, True),
    "aes-256-gcm": (32, True),
}

_IV_LENGTH = {False: 16, True: 12}
_TAG_LENGTH = 16


class DecryptError(ValueError):
    """The payload could not be decrypted (invalid structure, MAC, tag, key or serialization)."""


class EncryptError(ValueError):
    """The value could not be encrypted."""


def parse_app_key(app_key: str | bytes) -> bytes:
    """An ``APP_KEY`` as Laravel reads it: ``base64:...`` is decoded, anything else is used as is."""
    if isinstance(app_key, bytes):
        app_key = app_key.decode("utf-8")
    if app_key.startswith("base64:"):
        try:
            return base64.b64decode(app_key[len("base64:"):], validate=True)
        except binascii.Error:
            raise ValueError("APP_KEY has a base64: prefix but is not valid base64") from None
    return app_key.encode("utf-8")


def _b64decode_strict(text: object, field: str) -> bytes:
    if not isinstance(text, str):
        raise DecryptError(f"The payload is invalid: {field} is not a string.")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise DecryptError(f"The payload is invalid: {field} is not base64.") from None


def php_serialize_string(value: bytes) -> bytes:
    """PHP ``serialize()`` of a string: ``s:<byte length>:"<bytes>";``."""
    return b's:%d:"' % len(value) + value + b'";'


def php_unserialize_string(data: bytes) -> bytes:
    """The inverse of :func:`php_serialize_string`; anything else (or a wrong length) is an error."""
    head, sep, rest = data.partition(b':"')
    if not sep or not head.startswith(b"s:") or not head[2:].isdigit():
        raise DecryptError("The decrypted value is not a serialized PHP string.")
    length = int(head[2:])
    if len(rest) != length + 2 or rest[length:] != b'";':
        raise DecryptError("The decrypted value is not a well-formed serialized PHP string.")
    return rest[:length]


class Encrypter:
    """Laravel's ``Illuminate\\Encryption\\Encrypter`` for AES-128/256 in CBC or GCM mode."""

    def __init__(
        self,
        key: bytes | str,
        cipher: str = "AES-256-CBC",
        previous_keys: Sequence[bytes | str] = (),
    ) -> None:
        name = cipher.lower()
        if name not in SUPPORTED_CIPHERS:
            supported = ", ".join(sorted(SUPPORTED_CIPHERS))
            raise ValueError(f"Unsupported cipher {cipher!r}; supported ciphers: {supported}.")
        key_length, aead = SUPPORTED_CIPHERS[name]
        keys = [k.encode("utf-8") if isinstance(k, str) else bytes(k) for k in (key, *previous_keys)]
        for index, candidate in enumerate(keys):
            if len(candidate) != key_length:
                which = "key" if index == 0 else f"previous key #{index}"
                raise ValueError(
                    f"Incorrect {which} length for {name}: expected {key_length} bytes, got {len(candidate)}."
                )
        self.cipher = name
        self._aead = aead
        self._key = keys[0]
        self._all_keys = keys

    @classmethod
    def from_app_key(
        cls,
        app_key: str | bytes,
        cipher: str = "AES-256-CBC",
        previous_keys: Sequence[str | bytes] = (),
    ) -> Encrypter:
        """Build from ``APP_KEY`` (and ``APP_PREVIOUS_KEYS`` entries), ``base64:`` prefix aware."""
        return cls(parse_app_key(app_key), cipher, [parse_app_key(k) for k in previous_keys])

    @property
    def key(self) -> bytes:
        """The raw key (it also signs queued closures, as ``SerializableClosure::setSecretKey`` does)."""
        return self._key

    def __repr__(self) -> str:  # never show the key
        return f"<Encrypter {self.cipher} keys={len(self._all_keys)}>"

    @property
    def iv_length(self) -> int:
        return _IV_LENGTH[self._aead]

    # -- encryption ---------------------------------------------------------------------------

    def encrypt(self, value: bytes | str, *, serialize: bool = True) -> str:
        """Encrypt ``value`` (PHP-serialized first when ``serialize``) into Laravel's payload text."""
        plaintext = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        if serialize:
            plaintext = php_serialize_string(plaintext)
        iv = os.urandom(self.iv_length)
        # start-up: cryptography's ciphers (~6 MB resident) load only when a payload is encrypted or decrypted
        from cryptography.hazmat.primitives import padding  # start-up: as above
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # start-up: as above
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # start-up: as above
        if self._aead:
            sealed = AESGCM(self._key).encrypt(iv, plaintext, None)
            ciphertext, tag = sealed[:-_TAG_LENGTH], sealed[-_TAG_LENGTH:]
        else:
            padder = padding.PKCS7(128).padder()
            padded = padder.update(plaintext) + padder.finalize()
            encryptor = Cipher(algorithms.AES(self._key), modes.CBC(iv)).encryptor()
            ciphertext, tag = encryptor.update(padded) + encryptor.finalize(), b""
        iv_b64 = base64.b64encode(iv).decode("ascii")
        value_b64 = base64.b64encode(ciphertext).decode("ascii")
        mac = "" if self._aead else self._mac(self._key, iv_b64, value_b64)
        document = {"iv": iv_b64, "value": value_b64, "mac": mac, "tag": base64.b64encode(tag).decode("ascii")}
        # base64 text never contains characters JSON must escape; "/" stays raw (JSON_UNESCAPED_SLASHES).
        text = json.dumps(document, separators=(",", ":"))
        return base64.b64encode(text.encode("ascii")).decode("ascii")

    def encrypt_string(self, value: bytes | str) -> str:
        return self.encrypt(value, serialize=False)

    # -- decryption ---------------------------------------------------------------------------

    def decrypt(self, payload: str | bytes, *, unserialize: bool = True) -> bytes:
        """Decrypt Laravel's payload text; with ``unserialize`` unwrap the PHP string it holds."""
        document = self._document(payload)
        iv = _b64decode_strict(document["iv"], "iv")
        if len(iv) != self.iv_length:
            raise DecryptError("The payload is invalid: wrong IV length for the cipher.")
        ciphertext = _b64decode_strict(document["value"], "value")
        tag_text = document.get("tag") or ""
        if self._aead:
            tag = _b64decode_strict(tag_text, "tag")
            if len(tag) != _TAG_LENGTH:
                raise DecryptError("Could not decrypt the data: the GCM tag is missing or has the wrong length.")
            plaintext = self._decrypt_gcm(iv, ciphertext, tag)
        else:
            if tag_text:
                raise DecryptError("Unable to use tag because the cipher algorithm does not support AEAD.")
            key = self._key_for_mac(document["iv"], document["value"], document["mac"])
            plaintext = self._decrypt_cbc(key, iv, ciphertext)
        return php_unserialize_string(plaintext) if unserialize else plaintext

    def decrypt_string(self, payload: str | bytes) -> bytes:
        return self.decrypt(payload, unserialize=False)

    @staticmethod
    def _mac(key: bytes, iv_b64: str, value_b64: str) -> str:
        return hmac.new(key, (iv_b64 + value_b64).encode("ascii"), hashlib.sha256).hexdigest()

    def _document(self, payload: str | bytes) -> dict[str, object]:
        raw = payload.encode("ascii", "replace") if isinstance(payload, str) else bytes(payload)
        try:
            decoded = json_loads(base64.b64decode(raw, validate=False))
        except (binascii.Error, ValueError):
            raise DecryptError("The payload is invalid: not base64-encoded JSON.") from None
        if not isinstance(decoded, dict):
            raise DecryptError("The payload is invalid: not a JSON object.")
        for field in ("iv", "value", "mac"):
            if not isinstance(decoded.get(field), str):
                raise DecryptError(f"The payload is invalid: missing or non-string {field!r}.")
        if "tag" in decoded and decoded["tag"] is not None and not isinstance(decoded["tag"], str):
            raise DecryptError("The payload is invalid: 'tag' is not a string.")
        return decoded

    def _key_for_mac(self, iv_b64: object, value_b64: object, mac: object) -> bytes:
        assert isinstance(iv_b64, str) and isinstance(value_b64, str) and isinstance(mac, str)
        try:
            given = mac.encode("ascii")
        except UnicodeEncodeError:
            raise DecryptError("The MAC is invalid.") from None
        for key in self._all_keys:
            if hmac.compare_digest(self._mac(key, iv_b64, value_b64).encode("ascii"), given):
                return key
        raise DecryptError("The MAC is invalid.")

    @staticmethod
    def _decrypt_cbc(key: bytes, iv: bytes, ciphertext: bytes) -> bytes:
        if not ciphertext or len(ciphertext) % 16:
            raise DecryptError("Could not decrypt the data.")
        # start-up: cryptography's ciphers (~6 MB resident) load only when a payload is decrypted
        from cryptography.hazmat.primitives import padding  # start-up: as above
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # start-up: as above
        decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
        padded = decryptor.update(ciphertext) + decryptor.finalize()
        unpadder = padding.PKCS7(128).unpadder()
        try:
            return unpadder.update(padded) + unpadder.finalize()
        except ValueError:
            raise DecryptError("Could not decrypt the data.") from None

    def _decrypt_gcm(self, iv: bytes, ciphertext: bytes, tag: bytes) -> bytes:
        # start-up: cryptography's ciphers (~6 MB resident) load only when a payload is decrypted
        from cryptography.exceptions import InvalidTag  # start-up: as above
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # start-up: as above
        for key in self._all_keys:
            try:
                return AESGCM(key).decrypt(iv, ciphertext + tag, None)
            except InvalidTag:
                continue
        raise DecryptError("Could not decrypt the data.")
