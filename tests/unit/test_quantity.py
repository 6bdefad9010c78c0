"""vkbridge.quantity: apimachinery's ParseQuantity, exactly, and a parseable human format.

The APIMACHINERY table was produced by running k8s.io/apimachinery v0.36.3 `resource.ParseQuantity` on
each string (value printed with `AsDec().String()`, None where it returns an error). The same Go program
agreed with `parse_quantity` on ~200,000 random strings; these are the interesting ones.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vkbridge.quantity import (
    MAX_INT64,
    NANO,
    QuantityError,
    format_quantity,
    milli_value,
    parse_quantity,
    round_nano,
)

APIMACHINERY: list[tuple[str, str | None]] = [
    # the usual forms
    ("100m", "0.100"),
    ("1Gi", "1073741824"),
    ("1e3", "1000"),
    ("0.5", "0.5"),
    ("1.5Gi", "1610612736.000000000"),
    ("2k", "2000"),
    ("1E", "1000000000000000000"),
    ("500u", "0.000500"),
    ("10n", "0.000000010"),
    ("4", "4"),
    ("110", "110"),
    ("20Gi", "21474836480"),
    ("8Gi", "8589934592"),
    ("123Mi", "128974848"),
    ("129e6", "129000000"),
    ("1.25", "1.25"),
    ("250m", "0.250"),
    ("1m", "0.001"),
    ("1.5Mi", "1572864.000000000"),
    ("1Ki", "1024"),
    ("1E3", "1000"),
    ("1e+3", "1000"),
    ("1e-3", "0.001"),
    ("-5m", "-0.005"),
    ("+5m", "0.005"),
    # oddities apimachinery accepts
    ("0", "0"),
    ("-0", "0"),
    ("00", "0"),
    (".", "0"),
    ("-", "0"),
    ("+", "0"),
    ("Mi", "0"),
    ("m", "0"),
    ("e3", "0"),
    ("1.", "1"),
    ("1.G", "1000000000"),
    (".5", "0.5"),
    ("1.Ki", "1024"),
    # rounding up to 1n, away from zero
    ("1e-100", "0.000000001"),
    ("0.1n", "0.000000001"),
    ("1.5n", "0.000000002"),
    ("-0.1n", "-0.000000001"),
    ("1e-9", "0.000000001"),
    ("1e-10", "0.000000001"),
    ("5e-10", "0.000000001"),
    ("0.0000000001Ki", "0.000000103"),
    ("0.123456789012345678", "0.123456790"),
    ("1.000000000000000000001", "1.000000001"),
    ("3.3333333333", "3.333333334"),
    # the int64 cap applies to binary suffixes only
    ("7Ei", "8070450532247928832.000000000"),
    ("8Ei", "9223372036854775807"),
    ("9Ei", "9223372036854775807"),
    ("-9Ei", "-9223372036854775807"),
    ("8191Pi", "9222246136947933184.000000000"),
    ("8192Pi", "9223372036854775807"),
    ("9223372036854775807Ki", "9223372036854775807"),
    ("9223372036854775807", "9223372036854775807.000000000"),
    ("9223372036854775808", "9223372036854775808.000000000"),
    ("1234567890123456789", "1234567890123456789.000000000"),
    # the exponent is an int32 in Go
    ("1e4294967296", "1"),
    ("1e4294967297", "10"),
    # refused
    ("e-10", None),
    (".Ei", None),
    ("1e", None),
    ("1e1.5", None),
    ("1ki", None),
    ("1K", None),
    (" 1", None),
    ("1 ", None),
    ("1Gi5", None),
    ("1m1", None),
    ("0x10", None),
    ("1_000", None),
    ("1µ", None),
    ("1EE", None),
    ("1e-", None),
    ("1Ei3", None),
    ("ee3", None),
    ("1mm", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "expected"), APIMACHINERY)
def test_parse_matches_apimachinery(text: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(QuantityError):
            parse_quantity(text)
    else:
        assert parse_quantity(text) == Fraction(expected)


@pytest.mark.parametrize("text", ["1e100", "1e2147483647", "-1e100", "1" * 101, "0.0000001e-2147483648"])
def test_magnitudes_beyond_1e100_are_refused(text: str) -> None:
    # apimachinery keeps these as unbounded decimals; an exact Python value could exhaust memory.
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity(text)


def test_huge_binary_and_tiny_values_stay_cheap() -> None:
    assert parse_quantity("1" * 200 + "Ki") == MAX_INT64
    assert parse_quantity("0." + "0" * 500 + "1Ki") == NANO
    assert parse_quantity("0." + "1" * 400) == Fraction("0.111111112")


@pytest.mark.parametrize(("short", "value"), [("500m", "1/2"), ("1Gi", "1073741824"), ("-2k", "-2000")])
def test_memoized_short_strings_parse_as_long_ones_do(short: str, value: str) -> None:
    # Short strings are memoized, long ones are not: both paths, twice each, give the same exact value.
    sign, body = ("-", short[1:]) if short.startswith("-") else ("", short)
    long = sign + "0" * 80 + body
    for _ in range(2):
        assert parse_quantity(short) == parse_quantity(long) == Fraction(value)
    for _ in range(2):
        with pytest.raises(QuantityError):
            parse_quantity(short + "x")


@pytest.mark.parametrize("bad", [None, 1, 1.5, b"1"])
def test_non_strings_are_refused(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "resource", "text"),
    [
        (Fraction(2), "cpu", "2"),
        (Fraction(1, 2), "cpu", "500m"),
        (Fraction(3, 2), "cpu", "1500m"),
        (Fraction(1, 4000), "cpu", "250u"),
        (Fraction(-1, 2), "cpu", "-500m"),
        (Fraction(0), "cpu", "0"),
        (Fraction(2**30), "memory", "1Gi"),
        (Fraction(512 * 2**20), "memory", "512Mi"),
        (Fraction(3 * 2**29), "memory", "1.5Gi"),
        (Fraction(10**9), "memory", "1G"),
        (Fraction(2**30 + 1), "memory", "1073741825"),
        (Fraction(-(2**29)), "memory", "-512Mi"),
        (Fraction(20 * 2**30), "ephemeral-storage", "20Gi"),
        (Fraction(4 * 2**20), "hugepages-2Mi", "4Mi"),
        (Fraction(1, 2), "memory", "500m"),
        (Fraction(110), "pods", "110"),
        (Fraction(2000), "pods", "2000"),
        (Fraction(1), "nvidia.com/gpu", "1"),
        (Fraction(1, 3), "cpu", "333333334n"),  # finer than 1n: rounded up like the parser
    ],
)
def test_format_table(value: Fraction, resource: str, text: str) -> None:
    assert format_quantity(value, resource) == text


def test_helpers() -> None:
    assert milli_value(parse_quantity("100m")) == 100
    assert milli_value(parse_quantity("1n")) == 1  # rounded up, like Quantity.MilliValue
    assert milli_value(parse_quantity("-1n")) == -1
    assert milli_value(parse_quantity("2")) == 2000
    assert round_nano(Fraction(1, 3)) == Fraction(333333334, 10**9)
    assert round_nano(Fraction(-1, 3)) == Fraction(-333333334, 10**9)


# ---- properties --------------------------------------------------------------------------------------------

RESOURCES = ["cpu", "memory", "pods", "ephemeral-storage", "hugepages-2Mi", "nvidia.com/gpu", ""]
nanos = st.integers(min_value=-(10**40), max_value=10**40).map(lambda n: Fraction(n, 10**9))
small_ints = st.integers(min_value=0, max_value=10**12)


@given(nanos, st.sampled_from(RESOURCES))
def test_format_parses_back_to_the_same_value(value: Fraction, resource: str) -> None:
    text = format_quantity(value, resource)
    assert parse_quantity(text) == value
    assert format_quantity(parse_quantity(text), resource) == text


@given(st.integers(min_value=-(10**99), max_value=10**99), st.sampled_from(RESOURCES))
def test_format_round_trips_far_beyond_int64(value: int, resource: str) -> None:
    assert parse_quantity(format_quantity(value, resource)) == value


@given(small_ints, st.sampled_from(["n", "u", "m", "", "k", "M", "G", "T", "P", "E"]))
def test_decimal_suffixes(n: int, suffix: str) -> None:
    exp = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}[suffix]
    assert parse_quantity(f"{n}{suffix}") == n * Fraction(10) ** exp


@given(small_ints, st.sampled_from(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]))
def test_binary_suffixes_cap_at_int64(n: int, suffix: str) -> None:
    exact = n * 2 ** {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}[suffix]
    assert parse_quantity(f"{n}{suffix}") == min(exact, MAX_INT64)


@given(small_ints, st.integers(min_value=-9, max_value=40), st.sampled_from(["e", "E"]))
def test_exponent_forms(n: int, exp: int, letter: str) -> None:
    assert parse_quantity(f"{n}{letter}{exp}") == n * Fraction(10) ** exp


@settings(max_examples=60)
@given(st.from_regex(r"\A[0-9]{1,12}(\.[0-9]{1,12})?(|[numkMGTPE]|[KMGTPE]i|e-?[0-9])\Z", fullmatch=True))
def test_sign_is_symmetric(body: str) -> None:
    value = parse_quantity(body)
    assert parse_quantity("+" + body) == value
    assert parse_quantity("-" + body) == -value


@given(st.text(alphabet="0123456789.+-eEinumkKMGTP x", max_size=12))
def test_anything_either_parses_or_raises_quantity_error(text: str) -> None:
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert round_nano(value) == value  # always a whole number of nano units
    assert abs(value) < 10**100


@settings(max_examples=100)
@given(st.fractions(max_denominator=10**12))
def test_round_nano_rounds_away_from_zero_by_less_than_1n(value: Fraction) -> None:
    rounded = round_nano(value)
    assert round_nano(rounded) == rounded
    assert abs(rounded) >= abs(value)
    assert abs(rounded - value) < NANO
    assert (rounded > 0) == (value > 0) or value == 0


@pytest.mark.parametrize(
    "text",
    [
        "1." + "1" * 5000,  # Python cannot read 5,000 digits as an int (its 4,300-digit limit)
        "0." + "7" * 5000 + "Mi",
        "1e" + "1" * 5000,  # an exponent far beyond int64: strconv.ParseInt refuses it
        "1e-" + "9" * 5000,
    ],
)
def test_a_quantity_with_thousands_of_digits_is_a_quantity_error_not_a_bare_value_error(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_thousands_of_zeros_still_parse_exactly_as_apimachinery() -> None:
    assert parse_quantity("0.1" + "0" * 5000) == Fraction(1, 10)  # trailing zeros are not significant
    assert parse_quantity("1e" + "0" * 5000 + "3") == 1000  # ParseInt takes leading zeros
    assert parse_quantity("1e-" + "0" * 5000) == 1
    assert parse_quantity("0." + "0" * 5000 + "1") == NANO  # far below 1n rounds up to 1n
