"""Docs that cannot drift: every flag, metric name and log line quoted in docs/ exists in the code, and every
flag `vkbridge --help` prints is documented in docs/operations.md.

What counts as quoted: inline code spans (`...`) outside fenced blocks. A span is
- a flag when it starts with `--` (or is `-v`), or is a `vkbridge ...` command line; `{a,b}` and `*` in a
  documented flag stand for several (`--{service,ingress}-reflection-type`, `--klog.*`);
- a metric when it starts with a prefix vkbridge exports (`vkbridge_`, `liqo_virtual_kubelet_`,
  `process_`, `kubelet_`, the resource metrics ...); PromQL around it (`{...} == 1`) is ignored;
- a log line when it is in the Logs section of operations.md or the "vkbridge says" column of
  troubleshooting.md, or follows WARNING/ERROR: the message is the text before the first ` key=`;
  `...`, `<placeholder>`, `N`, `M` and `Xs` stand for any text, as an f-string's `{value}` does in code.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from vkbridge.cli import FLAGS, VERSION_FLAGS, build_parser
from vkbridge.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
CODE_DIRS = ("vkbridge", "reflectors")

_SPAN = re.compile(r"`([^`]+)`")  # a span may wrap onto the next line
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_FLAG = re.compile(r"(?<![\w-])--[a-z{][a-z0-9.{},*-]*[a-z0-9}*]")
_METRIC = re.compile(
    r"\b(?:(?:vkbridge|liqo_virtual_kubelet|kubelet|process|python_gc)_\w+|python_info"
    r"|(?:node|container|pod)_(?:cpu|memory|start)\w*|(?:resource_)?scrape_error)\b"
)
_NOT_OURS = ("kubectl", "curl", "liqoctl", "helm", "grep", "sed", "docker", "ctr", "[", "$", "vkbridge:")
_LEVEL = re.compile(r"\b(?:WARNING|ERROR)\s+`([^`\n]+)`")
_PLACEHOLDER = re.compile(r"<[^<>]*>|\.\.\.|…|\((?:\.\.\.)\)|\b[NM]\b|\bXs\b")
_WILD = "\x00"
_PERCENT = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdfrxi]")  # logging's lazy %-formatting
_SYNTAX_EXAMPLES = frozenset({"--flag"})  # `--flag=value`: how flags are written, not a flag


# ---- what the docs say -----------------------------------------------------------------------------------


def _text(path: Path) -> str:
    return _FENCE.sub("", path.read_text())


def _spans(text: str) -> list[str]:
    return [" ".join(s.split()) for s in _SPAN.findall(text) if "\n\n" not in s]


def _doc_files() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def _expand(flag: str) -> list[str]:
    """`--{a,b}-x` -> `--a-x`, `--b-x` (a `*` stays: it is matched as a glob)."""
    m = re.search(r"\{([^{}]*)\}", flag)
    if m is None:
        return [flag]
    return [x for alt in m[1].split(",") for x in _expand(flag[: m.start()] + alt + flag[m.end() :])]


def _span_flags(span: str) -> list[str]:
    words = span.split()
    if not words:
        return []
    if words[0] in ("vkbridge", "virtual-kubelet") or span.startswith("--") or span.split("=")[0] == "-v":
        found = [f.split("=")[0] for f in _FLAG.findall(span)]
        if span.split()[0].split("=")[0] == "-v" or " -v" in f" {span}":
            found.append("-v")
        return [x for f in found for x in _expand(f)]
    return []


def documented_flags(paths: list[Path]) -> dict[str, str]:
    """Every vkbridge flag quoted in ``paths`` -> where."""
    out: dict[str, str] = {}
    for path in paths:
        for span in _spans(_text(path)):
            for flag in _span_flags(span):
                if flag not in _SYNTAX_EXAMPLES:
                    out.setdefault(flag, path.name)
    return out


def documented_metrics() -> dict[str, str]:
    out: dict[str, str] = {}
    for path in _doc_files():
        for span in _spans(_text(path)):
            if span.split()[0] in _NOT_OURS or "/" in span.split()[0] or "." in span.split()[0]:
                continue
            for name in _METRIC.findall(span):
                out.setdefault(name, path.name)
    return out


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def _is_message(span: str) -> bool:
    first = span.split()[0]
    return (
        " " in span
        and not first.startswith(("-", "`", "[", "/", "$", "{"))
        and first not in _NOT_OURS
        and _METRIC.match(span) is None
        and not re.match(r"[a-z_]+=", span)
    )


def _message(span: str) -> str:
    """The message of a quoted log line: before the first ` key=`, without a trailing ` ...`."""
    msg = re.split(r"\s[a-z_]+=", f"{span} ", maxsplit=1)[0].strip()
    return re.sub(r"(\s*(\.\.\.|…))+$", " ...", msg).strip()


def documented_log_lines() -> dict[str, str]:
    spans: list[tuple[str, str]] = []
    ops = _text(DOCS / "operations.md")
    spans += [(s, "operations.md") for s in _spans(_section(ops, "\n## Logs"))]
    for path in _doc_files():
        text = _text(path)
        spans += [(s, path.name) for s in _LEVEL.findall(text)]
        if path.name == "troubleshooting.md":
            for line in text.splitlines():
                cells = line.split(" | ")
                if line.startswith("|") and len(cells) >= 3 and "---" not in line:
                    spans += [(s, path.name) for s in _spans(cells[1]) if "vkbridge says" not in cells[1]]
    out: dict[str, str] = {}
    for span, where in spans:
        for part in re.split(r"\s+/\s+", span):
            if _is_message(part):
                out.setdefault(_message(part), where)
    return out


# ---- what the code has -------------------------------------------------------------------------------------


def _code_files() -> Iterator[Path]:
    for d in CODE_DIRS:
        yield from (REPO / d).rglob("*.py")


def _fold(node: ast.expr, names: dict[str, str]) -> str | None:
    """A string expression as text: literals, f-strings (values wild), `+` of them and of module-level
    string constants; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _PERCENT.sub(_WILD, node.value) if "%" in node.value else node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            _fold(v, names) or _WILD if isinstance(v, ast.Constant) else _WILD for v in node.values
        )
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _fold(node.left, names), _fold(node.right, names)
        if left is not None or right is not None:
            return (left or _WILD) + (right or _WILD)
    return None


@functools.cache
def code_strings() -> tuple[str, ...]:
    """Every string expression in vkbridge/ and reflectors/ (see _fold)."""
    out: list[str] = []
    for path in _code_files():
        tree = ast.parse(path.read_text(), str(path))
        names: dict[str, str] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                text = _fold(stmt.value, names)
                for target in targets:
                    if isinstance(target, ast.Name) and text is not None:
                        names[target.id] = text
        for node in ast.walk(tree):
            if isinstance(node, ast.expr):
                text = _fold(node, names)
                if text is not None and text != _WILD:
                    out.append(text)
    return tuple(out)


def registered_metrics() -> set[str]:
    names: set[str] = set()
    for family in Metrics().registry.collect():
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def _globs_intersect(quote: str, template: str) -> bool:
    """Whether ``quote`` can be a line ``template`` writes. _WILD in the quote (a placeholder) stands for
    any text, as it may abbreviate; in the template (a value) for one word: it may stand for the quote's
    placeholders and text without spaces, never for a run of the quote's words, unless it ends the
    template (a trailing error message or reason)."""
    a, b = quote, template

    @functools.cache
    def go(i: int, j: int) -> bool:
        if i == len(a) or j == len(b):
            return a[i:].strip(_WILD) == "" and b[j:].strip(_WILD) == ""
        if a[i] == _WILD and (go(i + 1, j) or go(i, j + 1)):
            return True
        if b[j] == _WILD:
            if j == len(b) - 1:
                return True
            return go(i, j + 1) or ((a[i] == _WILD or not a[i].isspace()) and go(i + 1, j))
        return a[i] == b[j] and go(i + 1, j + 1)

    return go(0, 0)


def _longest_fragment(pattern: str) -> str:
    return max((f.strip() for f in pattern.split(_WILD)), key=len)


def quote_matches(message: str, template: str) -> bool:
    """A quoted message (placeholders for any text) can be what ``template`` (values wild) writes, and
    they share a literal run: the longest one of either is in the other (so `{a} {b}` matches nothing)."""
    pattern = re.sub(rf"\s*{_WILD}\s*$", _WILD, _PLACEHOLDER.sub(_WILD, message))
    ours, theirs = _longest_fragment(pattern), _longest_fragment(template)
    shared = (len(ours) >= 4 and ours in template) or (len(theirs) >= 4 and theirs in pattern)
    return shared and _globs_intersect(pattern, template)


def in_code(message: str) -> bool:
    words = re.findall(r"[A-Za-z]{4,}", _PLACEHOLDER.sub(" ", message))
    return any(quote_matches(message, s) for s in code_strings() if not words or any(w in s for w in words))


def _flag_names() -> set[str]:
    return {spec.flag for spec in FLAGS} | {"--v", "-v", "--help", *VERSION_FLAGS}


def _covered(flag: str, documented: set[str]) -> bool:
    return any(re.fullmatch(re.escape(d).replace(r"\*", ".*"), flag) for d in documented)


# ---- the tests ---------------------------------------------------------------------------------------------


def test_the_extraction_finds_what_the_docs_quote() -> None:
    """Guards the heuristics: if they stop finding these, the other tests would pass vacuously."""
    flags, metrics, lines = documented_flags(_doc_files()), documented_metrics(), documented_log_lines()
    assert {"--nodename", "--log-format", "-v", "--klog.v", "--foreign-cluster-id"} <= set(flags)
    assert {"vkbridge_pool_reachable", "liqo_virtual_kubelet_reflection_item_counter"} <= set(metrics)
    assert {"ShadowPod created", "pool reachable again", "node was deleted: re-created it"} <= set(lines)
    assert len(flags) > 40 and len(metrics) > 10 and len(lines) > 40


def test_every_documented_flag_exists() -> None:
    names = _flag_names()
    missing = {
        f: where
        for f, where in documented_flags(_doc_files()).items()
        if not (f in names or ("*" in f and any(_covered(n, {f}) for n in names)))
    }
    assert not missing, f"flags quoted in docs/ that vkbridge does not have: {missing}"


def test_every_flag_in_help_is_in_operations_md() -> None:
    shown = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9.-]*[a-z0-9]", build_parser().format_help()))
    shown |= {"-v"}
    shown -= {"--help", *_SYNTAX_EXAMPLES}
    documented = set(documented_flags([DOCS / "operations.md"]))
    missing = sorted(f for f in shown if not _covered(f, documented))
    assert not missing, f"flags in `vkbridge --help` that docs/operations.md does not mention: {missing}"


def test_every_documented_metric_exists() -> None:
    known = registered_metrics() | set(code_strings())
    missing = {m: where for m, where in documented_metrics().items() if m not in known}
    assert not missing, f"metrics quoted in docs/ that the code does not export: {missing}"


def test_every_documented_log_line_is_logged() -> None:
    missing = {m: where for m, where in documented_log_lines().items() if not in_code(m)}
    assert not missing, f"log lines quoted in docs/ that the code never writes: {missing}"


@pytest.mark.parametrize(
    ("quoted", "template", "match"),
    [
        ("ShadowPod created", "ShadowPod created", True),
        (
            "pods: handling <key> failed (...); retry N in Xs",
            f"{_WILD}: handling {_WILD} failed ({_WILD}); retry {_WILD} in {_WILD}",
            True,
        ),
        ("pool unreachable: ...", "pool unreachable: the node stops renewing its Lease", True),
        ("node was deleted: re-created it", "node was deleted: re-created", False),
        ("grant changed", "grant changes", False),
        ("pods: handling <key> failed (...); retry N in Xs", f"{_WILD}: {_WILD}", False),
        ("pods: handling <key> failed (...)", f"{_WILD}: the prefix must be a DNS-1123 subdomain", False),
    ],
)
def test_matching_of_quotes_and_templates(quoted: str, template: str, match: bool) -> None:
    assert quote_matches(_message(quoted), template) is match


def test_brace_expansion() -> None:
    assert _expand("--{a,b}-x-{c,d}") == ["--a-x-c", "--a-x-d", "--b-x-c", "--b-x-d"]
    assert _span_flags("--{service,ingress}-reflection-type") == [
        "--service-reflection-type",
        "--ingress-reflection-type",
    ]


def _tour() -> str:
    return _section(_text(DOCS / "architecture.md"), "## A newcomer's tour")


def test_the_newcomers_tour_names_files_and_symbols_that_exist() -> None:
    """The tour is how a newcomer finds a behaviour: every file it names exists, and every bare name it
    gives (a class, a function, `Class.attribute`) is defined in the code."""
    tour = _tour()
    assert tour.count("\n|") >= 10, "the tour lists at least the ten most common changes"
    code = "\n".join(p.read_text() for p in _code_files())
    missing = []
    for span in _spans(tour):
        if "/" in span or re.search(r"\.(py|md|json|yaml)$", span):
            if not (REPO / span.split(" ")[0]).exists():
                missing.append(span)
        elif re.fullmatch(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)?", span):
            name = span.split(".")[-1]
            if not re.search(rf"\b(class|def)\s+{name}\b|\bself\.{name}\b", code):
                missing.append(span)
    assert not missing, f"named in the tour but not found: {missing}"
