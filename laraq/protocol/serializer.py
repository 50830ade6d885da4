"""PHP ``serialize()`` / ``unserialize()`` codec for queued-job commands, safe on hostile input.

The public face of PHP's native serialization format as Laravel writes it into ``data.command``;
the work is done in four modules, one concept each:

* :mod:`laraq.protocol.phpvalues`: the values (:class:`PHPObject`, :class:`PHPEnum`,
  :class:`PHPReference`, :class:`PHPFloat`), :class:`PHPSerializeError`, property-name mangling,
  PHP's float text and the limits;
* :mod:`laraq.protocol.phpread`: :func:`loads`, the bounded reader (and the fast readers it checks);
* :mod:`laraq.protocol.phpwrite`: :func:`dumps`, the bytes PHP 8's ``serialize()`` writes;
* :mod:`laraq.protocol.phpshapes`: Carbon/DateTime (:func:`to_datetime`, :func:`from_datetime`) and
  ``SerializesModels``' :class:`ModelIdentifier`.

``dumps(loads(x)) == x`` for anything PHP itself serialized. The format, the reference numbering and
the limits are described in ``compat-docs/serialization.md``.
"""

from __future__ import annotations

from laraq.protocol.phpread import loads
from laraq.protocol.phpshapes import (
    DATE_CLASSES,
    MODEL_IDENTIFIER_CLASS,
    ModelIdentifier,
    from_datetime,
    is_model_identifier,
    to_datetime,
)
from laraq.protocol.phpvalues import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_ELEMENTS,
    PHP_INT_MAX,
    PHP_INT_MIN,
    PHPEnum,
    PHPFloat,
    PHPObject,
    PHPReference,
    PHPSerializeError,
    PropertyKey,
    Visibility,
    deref,
    format_float,
    mangle,
    unmangle,
)
from laraq.protocol.phpwrite import dumps

__all__ = [
    "DATE_CLASSES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_ELEMENTS",
    "MODEL_IDENTIFIER_CLASS",
    "PHP_INT_MAX",
    "PHP_INT_MIN",
    "ModelIdentifier",
    "PHPEnum",
    "PHPFloat",
    "PHPObject",
    "PHPReference",
    "PHPSerializeError",
    "PropertyKey",
    "Visibility",
    "deref",
    "dumps",
    "format_float",
    "from_datetime",
    "is_model_identifier",
    "loads",
    "mangle",
    "to_datetime",
    "unmangle",
]
