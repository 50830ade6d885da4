"""Views over the serialized shapes Laravel writes most: dates and ``ModelIdentifier``.

* :func:`to_datetime` / :func:`from_datetime`: Carbon (2 and 3), ``Illuminate\\Support\\Carbon``,
  ``DateTime`` and ``DateTimeImmutable``, all serialized as ``{date, timezone_type, timezone}``.
* :class:`ModelIdentifier`: what Laravel's ``SerializesModels`` writes in place of an Eloquent model or
  collection (``Illuminate\\Contracts\\Database\\ModelIdentifier``).

Both read and build :class:`laraq.protocol.phpvalues.PHPObject`; ``compat-docs/serialization.md``
("Laravel specifics") describes them.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any, ClassVar, Final

from laraq.protocol.phpvalues import PHPObject, PHPSerializeError, PropertyKey

__all__ = [
    "DATE_CLASSES",
    "MODEL_IDENTIFIER_CLASS",
    "ModelIdentifier",
    "from_datetime",
    "is_model_identifier",
    "to_datetime",
]

MODEL_IDENTIFIER_CLASS: Final = "Illuminate\\Contracts\\Database\\ModelIdentifier"

#: Classes whose serialized form is ``{date, timezone_type, timezone}``.
DATE_CLASSES: Final = frozenset(
    {
        "DateTime",
        "DateTimeImmutable",
        "Carbon\\Carbon",
        "Carbon\\CarbonImmutable",
        "Illuminate\\Support\\Carbon",
    }
)

# Offsets (minutes east of UTC) of the abbreviations PHP commonly writes as timezone_type 2.
_ABBREVIATIONS: Final[dict[str, int]] = {
    "utc": 0, "gmt": 0, "z": 0, "ut": 0, "wet": 0, "west": 60, "bst": 60, "ist": 60,
    "cet": 60, "cest": 120, "met": 60, "mest": 120, "eet": 120, "eest": 180, "msk": 180,
    "est": -300, "edt": -240, "cst": -360, "cdt": -300, "mst": -420, "mdt": -360,
    "pst": -480, "pdt": -420, "akst": -540, "akdt": -480, "hst": -600, "ast": -240, "adt": -180,
    "nst": -210, "ndt": -150, "jst": 540, "kst": 540, "hkt": 480, "sgt": 480, "awst": 480,
    "acst": 570, "acdt": 630, "aest": 600, "aedt": 660, "nzst": 720, "nzdt": 780,
}

_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?")
_OFFSET_RE = re.compile(r"([+-])(\d{2}):?(\d{2})(?::?(\d{2}))?")


def _offset_tz(text: str) -> timezone:
    m = _OFFSET_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"not a UTC offset: {text!r}")
    seconds = int(m.group(2)) * 3600 + int(m.group(3)) * 60 + int(m.group(4) or 0)
    delta = timedelta(seconds=seconds if m.group(1) == "+" else -seconds)
    if abs(delta) >= timedelta(days=1):
        raise ValueError(f"UTC offset out of range: {text!r}")
    return timezone(delta)


def to_datetime(obj: PHPObject) -> datetime:
    """An aware ``datetime`` from a serialized Carbon / ``DateTime`` / ``DateTimeImmutable``.

    ``timezone_type`` 3 (an identifier such as ``Europe/Paris``) gives a ``ZoneInfo``, 1 (an
    offset such as ``+05:30``) a fixed ``timezone``, 2 (an abbreviation such as ``EST``) a fixed
    ``timezone`` named after it when laraq knows the abbreviation. Raises ``ValueError``
    (:class:`PHPSerializeError` for a wrong shape) otherwise.
    """
    if not isinstance(obj, PHPObject):
        raise PHPSerializeError(f"expected a serialized date object, got {type(obj).__name__}")
    date = obj.get("date")
    tz_type = obj.get("timezone_type")
    tz_name = obj.get("timezone")
    if not isinstance(date, str) or type(tz_type) is not int or not isinstance(tz_name, str):
        raise PHPSerializeError(f"{obj.class_name} object has no date/timezone_type/timezone properties")
    m = _DATE_RE.fullmatch(date)
    if m is None:
        raise ValueError(f"unsupported date text {date!r} (years 1-9999 only)")
    micro = int((m.group(7) or "0").ljust(6, "0"))
    tz: tzinfo
    if tz_type == 3:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # start-up: zoneinfo only when a dated job comes

        try:
            tz = ZoneInfo(tz_name)
        except (ZoneInfoNotFoundError, ValueError):
            if tz_name.upper() == "UTC":
                tz = UTC
            else:
                raise ValueError(f"unknown time zone {tz_name!r}") from None
    elif tz_type == 1:
        tz = _offset_tz(tz_name)
    elif tz_type == 2:
        minutes = _ABBREVIATIONS.get(tz_name.lower())
        if minutes is None:
            raise ValueError(f"unknown time zone abbreviation {tz_name!r}")
        tz = timezone(timedelta(minutes=minutes), tz_name)
    else:
        raise ValueError(f"unknown timezone_type {tz_type}")
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)


def from_datetime(dt: datetime, class_name: str = "Illuminate\\Support\\Carbon") -> PHPObject:
    """The object PHP serializes for this moment: ``{date, timezone_type, timezone}``.

    A ``ZoneInfo`` zone (and ``timezone.utc``, written ``UTC``) gives ``timezone_type`` 3, any
    other fixed offset gives type 1 (``+05:30``). Naive datetimes are refused.
    """
    tz = dt.tzinfo
    if tz is None or dt.utcoffset() is None:
        raise ValueError("from_datetime() needs an aware datetime")
    # start-up: zoneinfo is imported when first used; a ZoneInfo zone exists only once it has been
    zoneinfo = sys.modules.get("zoneinfo")
    if zoneinfo is not None and isinstance(tz, zoneinfo.ZoneInfo):
        tz_type, tz_name = 3, tz.key
    elif tz is UTC:
        tz_type, tz_name = 3, "UTC"
    else:
        offset = dt.utcoffset()
        assert offset is not None
        total = int(offset.total_seconds())
        if total % 60:
            raise ValueError("PHP cannot hold a UTC offset with seconds")
        sign = "-" if total < 0 else "+"
        hours, minutes = divmod(abs(total) // 60, 60)
        tz_type, tz_name = 1, f"{sign}{hours:02d}:{minutes:02d}"
    date = (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d} "
        f"{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}.{dt.microsecond:06d}"
    )
    props: dict[PropertyKey, Any] = {"date": date, "timezone_type": tz_type, "timezone": tz_name}
    return PHPObject(class_name, props)


# -- ModelIdentifier -----------------------------------------------------------------------------


def is_model_identifier(obj: Any) -> bool:
    """True for a serialized ``Illuminate\\Contracts\\Database\\ModelIdentifier``."""
    return isinstance(obj, PHPObject) and obj.class_name == MODEL_IDENTIFIER_CLASS


@dataclass
class ModelIdentifier:
    """What ``SerializesModels`` writes in place of an Eloquent model or collection.

    ``id`` is the key (a list of keys for a collection); ``collection_class`` exists from
    Laravel 9.26 (``None`` when absent or null).
    """

    CLASS: ClassVar[str] = MODEL_IDENTIFIER_CLASS

    class_name: str
    id: Any
    relations: list[Any] = field(default_factory=list)
    connection: str | None = None
    collection_class: str | None = None

    @classmethod
    def from_php(cls, obj: PHPObject) -> ModelIdentifier:
        if not is_model_identifier(obj):
            name = obj.class_name if isinstance(obj, PHPObject) else type(obj).__name__
            raise PHPSerializeError(f"not a ModelIdentifier: {name}")
        class_name = obj.get("class")
        if not isinstance(class_name, str):
            raise PHPSerializeError("ModelIdentifier has no model class")
        relations = obj.get("relations")
        return cls(
            class_name=class_name,
            id=obj.get("id"),
            relations=list(relations.values()) if isinstance(relations, dict) else list(relations or []),
            connection=obj.get("connection"),
            collection_class=obj.get("collectionClass"),
        )

    @property
    def is_collection(self) -> bool:
        return isinstance(self.id, list)

    def to_php(self, *, include_collection_class: bool = True) -> PHPObject:
        """The wire object (``include_collection_class=False`` for Laravel before 9.26)."""
        props: dict[PropertyKey, Any] = {
            "class": self.class_name,
            "id": self.id,
            "relations": list(self.relations),
            "connection": self.connection,
        }
        if include_collection_class:
            props["collectionClass"] = self.collection_class
        return PHPObject(MODEL_IDENTIFIER_CLASS, props)
