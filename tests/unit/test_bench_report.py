"""The bench's fixed output shapes: the churn summary line the lead greps, and side-by-side cells."""

from bench.report import churn_line, markdown, with_load


def test_churn_line_has_the_exact_shape() -> None:
    assert (
        churn_line(612.4, 498.6, 20.0, True)
        == "churn p99 outbound 612 ms inbound 499 ms at 20/s isolated=yes"
    )


def test_churn_line_keeps_a_fractional_rate_and_says_shared() -> None:
    assert churn_line(26.0, 25.5, 2.5, False) == "churn p99 outbound 26 ms inbound 26 ms at 2.5/s isolated=no"


def test_churn_line_marks_a_missing_figure() -> None:
    assert churn_line(None, 10.0, 20, False) == "churn p99 outbound - ms inbound 10 ms at 20/s isolated=no"


def test_cell_carries_the_load_before_and_after() -> None:
    assert with_load(1.16, [3.5, 2.0, 1.0], [4.25, 3.0, 2.0]) == "1.160 (load 3.5->4.25)"
    assert with_load(None, [1.0], [1.0]) == "-"


def test_markdown_table() -> None:
    assert markdown(["a", "b"], [[1, "x"]]) == "| a | b |\n|---|---|\n| 1 | x |"
