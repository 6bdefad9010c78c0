"""Go's value syntax for Liqo's flags, as pflag reads it: durations, booleans, integers, maps and lists.

The parsers reproduce Go's ``time.ParseDuration``, ``strconv.ParseBool``/``ParseUint``/``ParseInt`` (as
pflag calls them), Liqo's ``argsutils.StringMap`` and pflag's ``StringSlice``, so every argument vector
Liqo's controller-manager writes means the same thing here. Pure: no I/O, standard library only.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "format_go_duration",
    "parse_go_bool",
    "parse_go_duration",
    "parse_go_duration_ns",
    "parse_go_int",
    "parse_go_uint",
    "parse_string_map",
    "parse_string_slice",
]

_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_TWO63: Final = 1 << 63


def _leading_int(s: str) -> tuple[int, str]:
    x = 0
    i = 0
    while i < len(s) and "0" <= s[i] <= "9":
        if x > _TWO63 // 10:
            raise ValueError("invalid duration")
        x = x * 10 + ord(s[i]) - 48
        if x > _TWO63:
            raise ValueError("invalid duration")
        i += 1
    return x, s[i:]


def _leading_fraction(s: str) -> tuple[int, float, str]:
    x = 0
    scale = 1.0
    overflow = False
    i = 0
    while i < len(s) and "0" <= s[i] <= "9":
        if not overflow:
            if x > (_TWO63 - 1) // 10:
                overflow = True
            else:
                y = x * 10 + ord(s[i]) - 48
                if y > _TWO63:
                    overflow = True
                else:
                    x = y
                    scale *= 10
        i += 1
    return x, scale, s[i:]


def parse_go_duration_ns(text: str) -> int:
    """Go's time.ParseDuration, in integer nanoseconds. Raises ValueError with Go's wording."""
    s = text
    total = 0
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError("invalid duration")
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            raise ValueError("invalid duration")
        before = len(s)
        v, s = _leading_int(s)
        pre = before != len(s)
        frac, scale, post = 0, 1.0, False
        if s and s[0] == ".":
            s = s[1:]
            before = len(s)
            frac, scale, s = _leading_fraction(s)
            post = before != len(s)
        if not pre and not post:
            raise ValueError("invalid duration")
        i = 0
        while i < len(s) and not (s[i] == "." or "0" <= s[i] <= "9"):
            i += 1
        if i == 0:
            raise ValueError("missing unit in duration")
        unit_name, s = s[:i], s[i:]
        unit = _UNITS.get(unit_name)
        if unit is None:
            raise ValueError(f'unknown unit "{unit_name}" in duration')
        if v > _TWO63 // unit:
            raise ValueError("invalid duration")
        v *= unit
        if frac > 0:
            v += int(float(frac) * (float(unit) / scale))  # float64 arithmetic, as Go does
            if v > _TWO63:
                raise ValueError("invalid duration")
        total += v
        if total > _TWO63:
            raise ValueError("invalid duration")
    if neg:
        return -total
    if total > _TWO63 - 1:
        raise ValueError("invalid duration")
    return total


def parse_go_duration(text: str) -> float:
    """Go's time.ParseDuration ("40s", "1m30s", "500ms", "-1.5h"), as float seconds."""
    return parse_go_duration_ns(text) / 1e9


def format_go_duration(seconds: float) -> str:
    """Go's Duration.String for whole milliseconds and above ("10h0m0s", "1m30s", "500ms", "0s")."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return f"{sign}{_trim(ns, size)}{unit}"
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    secs = _trim(rest, 1_000_000_000)
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


def _trim(value: int, size: int) -> str:
    whole, frac = divmod(value, size)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(size)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


def parse_go_bool(text: str) -> bool:
    """strconv.ParseBool."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise ValueError("not a boolean (use true or false)")


def _underscore_ok(s: str) -> bool:
    saw = "^"
    i = 0
    if s[:1] in ("+", "-"):
        s = s[1:]
    hexa = False
    if len(s) >= 2 and s[0] == "0" and s[1].lower() in "box":
        i = 2
        saw = "0"
        hexa = s[1].lower() == "x"
    while i < len(s):
        c = s[i]
        if "0" <= c <= "9" or (hexa and "a" <= c.lower() <= "f"):
            saw = "0"
        elif c == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
        i += 1
    return saw != "_"


def parse_go_uint(text: str, bits: int = 64, base: int = 0) -> int:
    """strconv.ParseUint(text, base, bits); pflag uses base 0 (0x.., 0o.., 0b.., 0.. octal, 1_000)."""
    if not text:
        raise ValueError("not a number")
    s = text
    base0 = base == 0
    if base0:
        base = 10
        if s[0] == "0":
            low = s[1:2].lower()
            if len(s) >= 3 and low in ("b", "o", "x"):
                base = {"b": 2, "o": 8, "x": 16}[low]
                s = s[2:]
            else:
                base = 8
                s = s[1:]
    max_val = (1 << bits) - 1
    n = 0
    underscores = False
    for c in s:
        if c == "_" and base0:
            underscores = True
            continue
        if "0" <= c <= "9":
            d = ord(c) - 48
        elif "a" <= c.lower() <= "z" and c.isascii():
            d = ord(c.lower()) - 87
        else:
            raise ValueError("not a number")
        if d >= base:
            raise ValueError("not a number")
        n = n * base + d
        if n > max_val:
            raise ValueError(f"out of range (maximum {max_val})")
    if underscores and not _underscore_ok(text):
        raise ValueError("not a number")
    return n


def parse_go_int(text: str, bits: int = 64) -> int:
    """strconv.ParseInt(text, 10, bits)."""
    if not text:
        raise ValueError("not a number")
    s, neg = text, False
    if s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    try:
        un = parse_go_uint(s, 64, base=10)
    except ValueError as exc:
        if "range" not in str(exc):
            raise
        un = 1 << 64
    cutoff = 1 << (bits - 1)
    if (not neg and un >= cutoff) or (neg and un > cutoff):
        raise ValueError(f"out of range ({-cutoff}..{cutoff - 1})")
    return -un if neg else un


def parse_string_map(text: str) -> dict[str, str]:
    """Liqo's argsutils.StringMap.Set: "k=v,k2=v2"; the first "=" splits, "" adds nothing."""
    out: dict[str, str] = {}
    if text == "":
        return out
    for chunk in text.split(","):
        key, sep, value = chunk.partition("=")
        if not sep:
            raise ValueError(f"{chunk!r} has no '=' (use key=value,key2=value2)")
        out[key] = value
    return out


def parse_string_slice(text: str) -> tuple[str, ...]:
    """pflag's StringSlice.Set: the first record of Go's encoding/csv ("a,b" is two values, "" none)."""
    if text == "":
        return ()
    text = text.replace("\r\n", "\n").removesuffix("\r").lstrip("\n")  # Go's readLine, empty lines
    if not text:
        raise ValueError("no record")
    out: list[str] = []
    i, end = 0, len(text)
    while True:
        if i < end and text[i] == '"':
            i += 1
            parts: list[str] = []
            while True:
                j = text.find('"', i)
                if j < 0:
                    raise ValueError('extraneous or missing " in quoted-field')
                parts.append(text[i:j])
                i = j + 1
                if text[i : i + 1] == '"':
                    parts.append('"')
                    i += 1
                elif i >= end or text[i] in ",\n":
                    break
                else:
                    raise ValueError('extraneous or missing " in quoted-field')
            out.append("".join(parts))
        else:
            j = i
            while j < end and text[j] not in ",\n":
                j += 1
            if '"' in text[i:j]:
                raise ValueError('bare " in non-quoted-field')
            out.append(text[i:j])
            i = j
        if i < end and text[i] == ",":
            i += 1
            continue
        return tuple(out)
