"""Log lines: human-readable by default, one JSON object per line with --log-format=json."""

from __future__ import annotations

import io
import json
import logging

from vkbridge.logs import get_logger, setup_logging


def capture(fmt: str, verbosity: int = 0) -> tuple[io.StringIO, logging.Logger]:
    out = io.StringIO()
    setup_logging(verbosity, fmt, stream=out)
    return out, logging.getLogger()


def test_text_lines_carry_level_logger_message_and_key_values() -> None:
    out, _ = capture("text")
    get_logger("reflectors.pods").info("ShadowPod created", pod="team/web", elapsed="12ms")
    line = out.getvalue().strip()
    assert " INFO  pods " in line
    assert line.endswith("ShadowPod created pod=team/web elapsed=12ms")
    assert line[:4].isdigit() and "Z " in line


def test_values_with_spaces_or_quotes_are_quoted() -> None:
    out, _ = capture("text")
    get_logger("vkbridge.pool").warning("pool unreachable", detail='no answer "within" 1s')
    assert 'detail="no answer \\"within\\" 1s"' in out.getvalue()


def test_json_format_is_one_object_per_line_with_fields() -> None:
    out, _ = capture("json")
    get_logger("reflectors.pods").info("local pod Running", pod="team/web", restarts=2)
    record = json.loads(out.getvalue().strip())
    assert record["level"] == "info" and record["logger"] == "reflectors.pods"
    assert record["msg"] == "local pod Running" and record["pod"] == "team/web" and record["restarts"] == 2


def test_debug_lines_only_from_verbosity_4() -> None:
    out, _ = capture("text", verbosity=2)
    get_logger("reflectors.pods").debug("details")
    assert out.getvalue() == ""
    out, _ = capture("text", verbosity=4)
    get_logger("reflectors.pods").debug("details")
    assert "DEBUG" in out.getvalue()


def test_json_lines_carry_severity_and_message_for_log_agents() -> None:
    out, _ = capture("json")
    log = get_logger("vkbridge.pool")
    log.warning("pool unreachable", after="3s")
    log.info("node Ready")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["severity"] == "WARNING" and first["message"] == "pool unreachable"
    assert first["level"] == "warning" and first["msg"] == "pool unreachable" and first["after"] == "3s"
    assert second["severity"] == "INFO" and second["message"] == "node Ready"


def test_json_context_never_overwrites_the_fixed_keys() -> None:
    out, _ = capture("json")
    get_logger("vkbridge.pool").error("renewal failed", severity="low", message="raw")
    record = json.loads(out.getvalue())
    assert record["severity"] == "ERROR" and record["message"] == "renewal failed"
    assert record["kv.severity"] == "low" and record["kv.message"] == "raw"
