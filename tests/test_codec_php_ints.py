"""Integers read the way PHP 8.2's ``unserialize()`` reads them, proven against real ``php``.

PHP accepts any number of digits after ``i:`` (leading zeros, a sign) and clamps a value outside the
64-bit range to ``PHP_INT_MAX``/``PHP_INT_MIN`` with a warning, for values and for array keys alike. Both
of laraq's paths (the C reader, which steps aside on such input, and the pure-Python reference) must give
PHP's answer. The same inputs go through ``php -r`` in one process and through ``loads``/
``loads_php_arrays``; PHP's answer comes back as JSON (integers only, so JSON is exact).
"""

from __future__ import annotations

import json
import shutil
import subprocess

from conftest import require

from laraq.protocol.phparray import loads_php_arrays
from laraq.protocol.serializer import PHPSerializeError, loads

DIGITS = [
    "0", "-0", "+0", "5", "+5", "-5", "007", "-007", "9223372036854775807", "9223372036854775808",
    "-9223372036854775808", "-9223372036854775809", "18446744073709551616", "39223372036854775807",
    "92233720368547758089", "-92233720368547758089", "0" * 60 + "5", "-" + "0" * 40 + "9223372036854775808",
    "9" * 25, "9" * 26, "+" + "1" * 300, "-" + "9" * 5000, "00000000000000000009223372036854775807",
    "0000000000000000000009223372036854775808",
]
BAD = ["", "+", "-", "--5", "+-5", " 5", "5 ", "0x10", "1e3", "1.5"]


def _inputs() -> list[bytes]:
    out: list[bytes] = []
    for d in DIGITS + BAD:
        out += [f"i:{d};".encode(), f"a:1:{{i:0;i:{d};}}".encode(), f"a:1:{{i:{d};i:1;}}".encode(),
                f'O:8:"stdClass":1:{{s:1:"x";i:{d};}}'.encode()]
    return out


PHP_SCRIPT = r"""
$out = [];
foreach (json_decode(stream_get_contents(STDIN), true) as $hex) {
    $v = @unserialize(hex2bin($hex));
    if ($v === false) { $out[] = ["error"]; continue; }
    if (is_object($v)) { $v = ["object" => get_object_vars($v)]; }
    elseif (is_array($v)) { $pairs = []; foreach ($v as $k => $x) { $pairs[] = [$k, $x]; } $v = ["array" => $pairs]; }
    $out[] = ["value", $v];
}
echo json_encode($out);
"""


def _ours(data: bytes, read) -> list:  # type: ignore[no-untyped-def]
    try:
        v = read(data)
    except PHPSerializeError:
        return ["error"]
    if hasattr(v, "class_name"):
        return ["value", {"object": {k: x for k, x in v._props.items()}}]
    if isinstance(v, dict):
        return ["value", {"array": [[k, x] for k, x in v.items()]}]
    if isinstance(v, list):
        return ["value", {"array": [[k, x] for k, x in enumerate(v)]}]
    return ["value", v]


def test_integers_read_as_php_82_reads_them() -> None:
    require(shutil.which("php") is not None, "php not installed")
    inputs = _inputs()
    run = subprocess.run(["php", "-r", PHP_SCRIPT], input=json.dumps([d.hex() for d in inputs]),
                         capture_output=True, text=True, timeout=60, check=True)
    php = json.loads(run.stdout)
    assert len(php) == len(inputs)
    diffs = []
    for data, want in zip(inputs, php, strict=True):
        for name, read in (("loads", loads), ("loads_php_arrays", loads_php_arrays)):
            got = _ours(data, read)
            if got != want:
                diffs.append((name, data[:80], got, want))
    assert not diffs, diffs[:10]
