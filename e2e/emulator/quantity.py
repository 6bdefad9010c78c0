"""Kubernetes resource quantities: exact parsing and a canonical rendering close to Quantity.String()."""

from __future__ import annotations

import re
from fractions import Fraction

_BIN = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DEC = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
        "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
        "P": Fraction(10**15), "E": Fraction(10**18)}  # fmt: skip
_RE = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?\d+))?$")


def parse(q: str | int | float) -> Fraction:
    if isinstance(q, int | float):
        return Fraction(q)
    m = _RE.match(q.strip())
    if not m:
        raise ValueError(f"bad quantity {q!r}")
    num = Fraction(m.group(1))
    if m.group(3) is not None:
        return num * Fraction(10) ** int(m.group(3))
    suffix = m.group(2) or ""
    return num * (_BIN[suffix] if suffix in _BIN else _DEC[suffix])


def _is_binary(q: str | int | float) -> bool:
    return isinstance(q, str) and q.strip()[-2:] in _BIN


def render(value: Fraction, like: str | int | float = "") -> str:
    """Canonical form in the format family of ``like`` (binary SI when it used Ki/Mi/...)."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    v = abs(value)
    if _is_binary(like) and v.denominator == 1:
        for suffix, mult in reversed(_BIN.items()):
            if v % mult == 0:
                return f"{sign}{v // mult}{suffix}"
        return f"{sign}{v}"
    for suffix, mult in (
        ("E", 10**18),
        ("P", 10**15),
        ("T", 10**12),
        ("G", 10**9),
        ("M", 10**6),
        ("k", 10**3),
    ):
        if v.denominator == 1 and v % mult == 0:
            return f"{sign}{v // mult}{suffix}"
    if v.denominator == 1:
        return f"{sign}{v}"
    for suffix, div in (("m", Fraction(1, 1000)), ("u", Fraction(1, 10**6)), ("n", Fraction(1, 10**9))):
        scaled = v / div
        if scaled.denominator == 1:
            return f"{sign}{scaled}{suffix}"
    # Kubernetes rounds sub-nano values up to the next nano.
    return f"{sign}{-(-v * 10**9 // 1)}n"
