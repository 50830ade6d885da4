"""Tests for :mod:`laraq.protocol.encryption`: the corpus's encrypted commands, tampering, key rotation, and a
differential run against Laravel 8's own ``Encrypter`` in both directions."""

from __future__ import annotations

import base64
import json
import subprocess

import pytest
from conftest import FIXTURES, corpus_dir

from laraq.protocol.encryption import DecryptError, Encrypter, parse_app_key
from laraq.protocol.payload import Payload

APP_KEY = "base64:srj9QVmuADIUchwd/iag/u7inuvvH26bDFBsn5w4ghI="
CORPUS = corpus_dir()
VERSIONS = ["8.83.26", "9.52.22", "10.50.3", "11.56.0", "12.67.0", "13.x"]
ENCRYPT_PHP = FIXTURES / "php" / "encrypt.php"
CIPHERS = ["aes-128-cbc", "aes-256-cbc", "aes-128-gcm", "AES-256-GCM"]


def _key(cipher: str, fill: bytes = b"k") -> bytes:
    return fill * (16 if "128" in cipher else 32)


def _tamper(payload: str, field: str, new_value: str | None = None) -> str:
    doc = json.loads(base64.b64decode(payload))
    if new_value is None:
        raw = bytearray(base64.b64decode(doc[field])) if field != "mac" else bytearray(doc[field].encode())
        raw[0] ^= 1
        new_value = base64.b64encode(bytes(raw)).decode() if field != "mac" else raw.decode()
    doc[field] = new_value
    return base64.b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode()


# -- corpus ---------------------------------------------------------------------------------------

@pytest.mark.skipif(not (CORPUS / "manifest.json").exists(), reason="wire corpus not present")
@pytest.mark.parametrize("version", VERSIONS)
def test_corpus_encrypted_command(version: str) -> None:
    payload = Payload.parse((CORPUS / version / "encrypted.pushed.json").read_bytes())
    assert payload.is_encrypted_command and payload.command is not None
    expected = (CORPUS / version / "encrypted.command-decrypted.bin").read_bytes()
    encrypter = Encrypter.from_app_key(APP_KEY)
    assert encrypter.decrypt(payload.command, unserialize=False) == expected
    inner = encrypter.decrypt(payload.command)
    assert inner.startswith(b'O:21:"App\\Jobs\\EncryptedJob"')
    assert expected == b's:%d:"' % len(inner) + inner + b'";'
    # the wrapper document is exactly what Laravel writes (key order, unescaped slashes, empty tag)
    doc_text = base64.b64decode(payload.command)
    doc = json.loads(doc_text)
    assert list(doc) == ["iv", "value", "mac", "tag"] and doc["tag"] == ""
    assert b"\\/" not in doc_text


@pytest.mark.skipif(not (CORPUS / "manifest.json").exists(), reason="wire corpus not present")
def test_corpus_wrong_key_and_previous_keys() -> None:
    command = Payload.parse((CORPUS / "13.x" / "encrypted.pushed.json").read_bytes()).command
    assert command is not None
    with pytest.raises(DecryptError, match="MAC is invalid"):
        Encrypter(b"x" * 32).decrypt(command)
    rotated = Encrypter(b"x" * 32, previous_keys=[parse_app_key(APP_KEY)])
    assert rotated.decrypt(command).startswith(b"O:21:")
    rotated2 = Encrypter.from_app_key("base64:" + base64.b64encode(b"y" * 32).decode(), previous_keys=[APP_KEY])
    assert rotated2.decrypt(command).startswith(b"O:21:")


# -- round trips and errors -----------------------------------------------------------------------

@pytest.mark.parametrize("cipher", CIPHERS)
def test_round_trip(cipher: str) -> None:
    enc = Encrypter(_key(cipher), cipher)
    for value in (b"", b"x", b"16 bytes exactly", "héllo ☃ 😀".encode(), bytes(range(256)) * 3):
        token = enc.encrypt(value)
        assert enc.decrypt(token) == value
        assert enc.decrypt(token, unserialize=False) == b's:%d:"' % len(value) + value + b'";'
        assert enc.decrypt(enc.encrypt(value, serialize=False), unserialize=False) == value
    assert enc.encrypt("same") != enc.encrypt("same")  # random IV
    doc = json.loads(base64.b64decode(enc.encrypt("v")))
    assert list(doc) == ["iv", "value", "mac", "tag"]
    assert len(base64.b64decode(doc["iv"])) == (12 if "gcm" in cipher.lower() else 16)
    if "gcm" in cipher.lower():
        assert doc["mac"] == "" and len(base64.b64decode(doc["tag"])) == 16
    else:
        assert len(doc["mac"]) == 64 and doc["tag"] == ""


@pytest.mark.parametrize("cipher", CIPHERS)
@pytest.mark.parametrize("field", ["iv", "value", "mac", "tag"])
def test_tampering_is_detected(cipher: str, field: str) -> None:
    enc = Encrypter(_key(cipher), cipher)
    token = enc.encrypt("secret payload")
    gcm = "gcm" in cipher.lower()
    if field == "tag" and not gcm:
        tampered = _tamper(token, "tag", base64.b64encode(b"t" * 16).decode())
    elif field == "mac" and gcm:
        tampered = _tamper(token, "tag")  # the tag is GCM's MAC
    else:
        tampered = _tamper(token, field)
    with pytest.raises(DecryptError):
        enc.decrypt(tampered)


@pytest.mark.parametrize("cipher", CIPHERS)
def test_wrong_key(cipher: str) -> None:
    token = Encrypter(_key(cipher), cipher).encrypt("secret")
    with pytest.raises(DecryptError):
        Encrypter(_key(cipher, b"z"), cipher).decrypt(token)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "not base64 !!",
        base64.b64encode(b"[1,2]").decode(),
        base64.b64encode(b'{"iv":"a"}').decode(),
        base64.b64encode(b'{"iv":1,"value":"x","mac":"y"}').decode(),
        base64.b64encode(b'{"iv":"AAAA","value":"x","mac":"y","tag":""}').decode(),
    ],
)
def test_invalid_structure(bad: str) -> None:
    with pytest.raises(DecryptError, match="invalid"):
        Encrypter(b"k" * 32).decrypt(bad)


def test_unserialize_requires_php_string() -> None:
    enc = Encrypter(b"k" * 32)
    for plain in (b"a:0:{}", b's:5:"abc";', b's:3:"abc"', b"i:1;"):
        token = enc.encrypt(plain, serialize=False)
        with pytest.raises(DecryptError, match="serialized PHP string"):
            enc.decrypt(token)


def test_errors_do_not_leak_key_material() -> None:
    key = b"S" * 32
    enc = Encrypter(key)
    token = Encrypter(b"T" * 32).encrypt("x")
    with pytest.raises(DecryptError) as info:
        enc.decrypt(token)
    assert "SSSS" not in str(info.value) and "SSSS" not in repr(enc)
    with pytest.raises(ValueError) as info2:
        Encrypter(b"short-key-material")
    assert "short-key-material" not in str(info2.value)


def test_unsupported_cipher_and_key_length() -> None:
    with pytest.raises(ValueError, match="Unsupported cipher"):
        Encrypter(b"k" * 32, "aes-256-ctr")
    with pytest.raises(ValueError, match="expected 16 bytes"):
        Encrypter(b"k" * 32, "AES-128-CBC")
    with pytest.raises(ValueError, match="previous key #1"):
        Encrypter(b"k" * 32, previous_keys=[b"short"])
    assert parse_app_key("plain-text-key-of-32-characters!") == b"plain-text-key-of-32-characters!"


# -- differential against Laravel 8's Encrypter ---------------------------------------------------

def _php(php: str, mode: str, cipher: str, key: bytes, serialize: bool, data: bytes) -> bytes:
    result = subprocess.run(
        [php, str(ENCRYPT_PHP), mode, cipher, base64.b64encode(key).decode(), "1" if serialize else "0"],
        input=data, capture_output=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.php
@pytest.mark.parametrize("cipher", ["aes-128-cbc", "aes-256-cbc", "aes-128-gcm", "aes-256-gcm"])
@pytest.mark.parametrize("serialize", [True, False])
def test_php_interop(php: str, cipher: str, serialize: bool) -> None:
    key = _key(cipher, b"q")
    enc = Encrypter(key, cipher)
    plaintext = 'O:8:"stdClass":1:{s:1:"a";s:9:"é/☃ \x00x";}'.encode()
    # Python encrypts, Laravel decrypts
    token = enc.encrypt(plaintext, serialize=serialize)
    assert _php(php, "decrypt", cipher, key, serialize, token.encode()) == plaintext
    # Laravel encrypts, Python decrypts
    php_token = _php(php, "encrypt", cipher, key, serialize, plaintext).decode()
    assert enc.decrypt(php_token, unserialize=serialize) == plaintext
    # same document shape on both sides
    assert list(json.loads(base64.b64decode(php_token))) == list(json.loads(base64.b64decode(token)))
