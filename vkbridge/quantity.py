"""Kubernetes resource quantities as exact fractions.

`parse_quantity` follows `k8s.io/apimachinery` v0.36 `resource.ParseQuantity` step by step (its fast path,
its slow path, int32 exponent arithmetic, rounding up to 1n away from zero, the 2^63-1 cap that applies to
binary-suffixed values only, and its odd acceptances such as ``"."``, ``"-"`` or ``"Mi"`` meaning zero), so
the grant arithmetic agrees with what the API server and the provider's webhook compute. The one deliberate
difference: values of magnitude >= 10**100 (apimachinery keeps them as unbounded decimals) raise
`QuantityError`, because an exact Python value of ``1e999999999`` would not fit in memory; so do values
with more than `MAX_SIGNIFICANT_DIGITS` significant digits (trailing zeros do not count), which
apimachinery would round to 1n but Python cannot even read as an integer (its 4,300-digit conversion
limit), and exponents too long for an int64 are refused as Go's ``strconv.ParseInt`` refuses them.

`format_quantity` renders a value for human messages (``2``, ``500m``, ``1.5Gi``); its output parses back to
the same value.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Final

__all__ = [
    "MAX_INT64",
    "NANO",
    "QuantityError",
    "format_quantity",
    "milli_value",
    "parse_quantity",
    "round_nano",
]

MAX_INT64: Final = 2**63 - 1
NANO: Final = Fraction(1, 10**9)
#: Magnitudes at or above 10**MAX_DIGITS are refused (see the module docstring).
MAX_DIGITS: Final = 100
#: More significant digits than this are refused (below Python's smallest int-str conversion limit, 640).
MAX_SIGNIFICANT_DIGITS: Final = 512

_DECIMAL_SUFFIXES: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")
_DIGITS: Final = frozenset("0123456789")
_GO_INT: Final = re.compile(r"[+-]?[0-9]+\Z")
_MAX_DIGITS_BOUND: Final = 10**MAX_DIGITS
# Binary-flavoured resources are shown with Ki/Mi/Gi suffixes when that is shorter.
_BINARY_RESOURCES: Final = frozenset({"memory", "ephemeral-storage", "storage"})
_ERR_FORMAT: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


class QuantityError(ValueError):
    """A string that apimachinery would refuse (or that is out of vkbridge's range)."""


def _i32(x: int) -> int:
    """Wrap to a signed 32-bit integer, as Go's int32 arithmetic does."""
    return (x + 2**31) % 2**32 - 2**31


def _split(s: str) -> tuple[bool, str, str, str, str]:
    """`parseQuantityString`: (positive, value, num, denom, suffix)."""
    positive = True
    pos = 0
    end = len(s)
    if pos < end:
        if s[0] == "-":
            positive = False
            pos += 1
        elif s[0] == "+":
            pos += 1
    # Leading zeros.
    i = pos
    while True:
        if i >= end:
            return positive, "0", "0", "", ""
        if s[i] != "0":
            break
        pos += 1
        i += 1
    # Numerator.
    i = pos
    while True:
        if i >= end:
            return positive, s, s[pos:], "", ""
        if s[i] not in _DIGITS:
            num = s[pos:i]
            pos = i
            break
        i += 1
    if not num:
        num = "0"
    denom = ""
    if pos < end and s[pos] == ".":
        pos += 1
        i = pos
        while True:
            if i >= end:
                return positive, s, num, s[pos:], ""
            if s[i] not in _DIGITS:
                denom = s[pos:i]
                pos = i
                break
            i += 1
    value = s[:pos]
    suffix_start = pos
    i = pos
    while True:
        if i >= end:
            return positive, value, num, denom, s[suffix_start:]
        if s[i] not in _SUFFIX_CHARS:
            pos = i
            break
        i += 1
    if pos < end and s[pos] in "+-":
        pos += 1
    for i in range(pos, end):
        if s[i] not in _DIGITS:
            raise QuantityError(f"{_ERR_FORMAT}: {s!r}")
    return positive, value, num, denom, s[suffix_start:]


def _interpret(suffix: str, original: str) -> tuple[int, int, bool]:
    """`suffixHandler.interpret`: (base, exponent, is_binary)."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], False
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], True
    if len(suffix) > 1 and suffix[0] in "eE" and _GO_INT.match(suffix[1:]):
        sign, digits = (-1 if suffix[1] == "-" else 1), suffix[1:].lstrip("+-").lstrip("0") or "0"
        parsed = sign * int(digits) if len(digits) <= 19 else 2**63  # longer: out of int64 range
        if -(2**63) <= parsed < 2**63:  # strconv.ParseInt(..., 10, 64)
            return 10, _i32(parsed), False
    raise QuantityError(f"unable to parse quantity's suffix: {original!r}")


def _decimal(sig: int, exp10: int, original: str) -> Fraction:
    """sig * 10**exp10, refusing magnitudes beyond MAX_DIGITS before computing them."""
    if sig == 0:
        return Fraction(0)
    if len(str(abs(sig))) + exp10 > MAX_DIGITS + 1:
        raise QuantityError(f"quantity out of range (magnitude >= 1e{MAX_DIGITS}): {original!r}")
    value = Fraction(sig) * Fraction(10) ** exp10
    if abs(value) >= _MAX_DIGITS_BOUND:
        raise QuantityError(f"quantity out of range (magnitude >= 1e{MAX_DIGITS}): {original!r}")
    return value


def parse_quantity(s: str) -> Fraction:
    """Parse a quantity exactly as apimachinery's ParseQuantity does; QuantityError where it refuses.

    Memoized for short strings: the grant parses every container's requests on each admission, from a
    handful of distinct values, and a Fraction is immutable (errors are not memoized)."""
    if isinstance(s, str) and len(s) <= _MEMO_MAX_LEN:
        return _parse_memo(s)
    return _parse_checked(s)


_MEMO_MAX_LEN: Final = 64


@functools.lru_cache(maxsize=4096)
def _parse_memo(s: str) -> Fraction:
    return _parse_checked(s)


def _parse_checked(s: str) -> Fraction:
    try:
        return _parse(s)
    except QuantityError:
        raise
    except ValueError as exc:  # a limit of Python's, not of the quantity: still the caller's bad input
        raise QuantityError(f"cannot parse quantity {s[:40]!r}...: {exc}") from None


def _parse(s: str) -> Fraction:
    if not isinstance(s, str):
        raise QuantityError(f"a quantity must be a string, not {type(s).__name__}")
    if not s:
        raise QuantityError(f"{_ERR_FORMAT}: ''")
    if s == "0":
        return Fraction(0)
    positive, value, num, denom, suffix = _split(s)
    base, exponent, binary = _interpret(suffix, s)

    # Fast path: an int64 mantissa and a scale no finer than nano (no rounding, no cap).
    scale = 0
    mantissa = 1
    if not binary:
        scale = exponent
        precision = 18 - (len(num) + len(denom))
    elif exponent >= 0 and not denom:
        mantissa = 1 << exponent
        precision = 15 - len(num) - (exponent * 3 // 10) - 1
    else:
        precision = -1
    if precision >= 0:
        scale = _i32(scale - len(denom))
        if scale >= -9:
            result = int(num + denom) * mantissa
            if result <= MAX_INT64:
                return _decimal(result if positive else -result, scale, s)

    # Slow path: inf.Dec.SetString(value), then the suffix, rounding up to 1n, and the binary cap.
    body = value[1:] if value[:1] in ("+", "-") else value
    int_part, dot, frac_part = body.partition(".")
    digits = int_part + frac_part
    if not digits:
        raise QuantityError(f"unable to parse quantity's numeric part: {s!r}")
    dec_scale = len(frac_part) if dot else 0
    if base == 10:
        dec_scale = _i32(dec_scale + _i32(-exponent))
        bin_exp = 0
    else:
        bin_exp = exponent
    sig_digits = digits.lstrip("0")
    if not sig_digits:
        return Fraction(0)
    # Magnitude of sig * 2**bin_exp / 10**dec_scale, decided on digit counts before any big arithmetic.
    int_digits = len(sig_digits) + (bin_exp * 3 // 10 + 1 if bin_exp else 0) - dec_scale
    if int_digits > MAX_DIGITS + 1:
        if binary:
            return Fraction(MAX_INT64 if positive else -MAX_INT64)
        raise QuantityError(f"quantity out of range (magnitude >= 1e{MAX_DIGITS}): {s!r}")
    if len(sig_digits) + 19 - dec_scale < -9:
        # Far below 1n: apimachinery rounds any non-zero value up to 1n.
        return NANO if positive else -NANO
    significant = sig_digits.rstrip("0")
    dec_scale -= len(sig_digits) - len(significant)  # same value, fewer digits to convert
    if len(significant) > MAX_SIGNIFICANT_DIGITS:
        raise QuantityError(
            f"quantity has {len(significant)} significant digits, more than {MAX_SIGNIFICANT_DIGITS}: "
            f"{s[:40]!r}..."
        )
    magnitude = round_nano(Fraction(int(significant) << bin_exp) / Fraction(10) ** dec_scale)
    if binary and magnitude > MAX_INT64:
        magnitude = Fraction(MAX_INT64)
    if magnitude >= _MAX_DIGITS_BOUND:
        raise QuantityError(f"quantity out of range (magnitude >= 1e{MAX_DIGITS}): {s!r}")
    return magnitude if positive else -magnitude


def round_nano(value: Fraction) -> Fraction:
    """Round to a multiple of 1n away from zero, as apimachinery does for finer values."""
    scaled = value * 10**9
    if scaled.denominator == 1:
        return value
    magnitude = -(-abs(scaled.numerator) // scaled.denominator)
    return Fraction(magnitude if value > 0 else -magnitude, 10**9)


def milli_value(value: Fraction) -> int:
    """Integer milli-units rounded away from zero, like `Quantity.MilliValue` (no int64 saturation)."""
    scaled = value * 1000
    magnitude = -(-abs(scaled.numerator) // scaled.denominator)
    return magnitude if value >= 0 else -magnitude


def _terminating(value: Fraction) -> str:
    """Exact decimal digits of a non-negative fraction whose denominator has only the factors 2 and 5."""
    den = value.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    if den != 1:
        raise ValueError("not a terminating decimal")
    places = max(twos, fives)
    scaled = value.numerator * 10**places // value.denominator
    if places == 0:
        return str(scaled)
    text = str(scaled).rjust(places + 1, "0")
    return f"{text[:-places]}.{text[-places:]}".rstrip("0").rstrip(".")


def _with_suffixes(value: Fraction, suffixes: dict[str, int], base: int) -> list[str]:
    out = []
    for suffix, exp in suffixes.items():
        mantissa = value / Fraction(base) ** exp
        if mantissa >= 1 or (suffix == "n" and mantissa > 0):
            out.append(_terminating(mantissa) + suffix)
    return out


def format_quantity(value: Fraction | int, resource: str = "") -> str:
    """Render a value for people: cpu as cores or ``m``, memory-like resources with the shortest of
    Ki/Mi/Gi… and k/M/G…, counts as plain integers. Values finer than 1n are first rounded like the parser.
    """
    value = round_nano(Fraction(value))
    if value < 0:
        return "-" + format_quantity(-value, resource)
    if value == 0:
        return "0"
    if resource in _BINARY_RESOURCES or resource.startswith("hugepages-"):
        candidates = _with_suffixes(value, _DECIMAL_SUFFIXES, 10)
        if value <= MAX_INT64:  # apimachinery caps binary-suffixed values at 2^63-1
            candidates = _with_suffixes(value, _BINARY_SUFFIXES, 2) + candidates
        # min() keeps the first of equal lengths: binary wins ties.
        return min(candidates, key=len)
    if value.denominator == 1:
        return str(value.numerator)
    for suffix, factor in (("m", 10**3), ("u", 10**6), ("n", 10**9)):
        scaled = value * factor
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    raise AssertionError("unreachable: value is a multiple of 1n")  # pragma: no cover
