"""Logging for people who read `kubectl logs deploy/vk-<slug>`.

One line per event, `key=value` context after the message so a pod's journey can be followed with
`grep pod=<ns>/<name>`. `--log-format=json` (or `--logging-format=json`, Kubernetes' name) gives one JSON
object per line for log pipelines.
Verbosity follows klog: 0-3 is info, 4 and above adds per-item debug lines.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

_RESERVED = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime", "kv"}
_JSON_KEYS = frozenset({"time", "level", "severity", "logger", "msg", "message", "error"})


def _format_value(value: object) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' "=\n\t'):
        return json.dumps(text, ensure_ascii=False)
    return text


class TextFormatter(logging.Formatter):
    """`2026-11-29T10:00:00.123Z INFO  pods  ShadowPod created pod=ns/name elapsed=12ms`."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        ms = int(record.msecs)
        name = record.name.removeprefix("vkbridge.").removeprefix("reflectors.")
        line = f"{ts}.{ms:03d}Z {record.levelname:<5} {name:<12} {record.getMessage()}"
        kv: Mapping[str, object] = getattr(record, "kv", {}) or {}
        if kv:
            line += " " + " ".join(f"{k}={_format_value(v)}" for k, v in kv.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, msg, then the key=value context as fields.

    `severity` (INFO, WARNING, ...) and `message` repeat level and msg under the names log agents map
    without configuration (GKE's Cloud Logging among them); `level` and `msg` stay for existing queries.
    A context key that collides with one of these is kept as `kv.<key>`.
    """

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "severity": record.levelname,
            "logger": record.name,
            "msg": message,
            "message": message,
        }
        kv: Mapping[str, object] = getattr(record, "kv", {}) or {}
        for k, v in kv.items():
            out[f"kv.{k}" if k in _JSON_KEYS else k] = (
                v if isinstance(v, int | float | bool) or v is None else str(v)
            )
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class Log:
    """A logger that takes context as keyword arguments: `log.info("created", pod=key)`."""

    __slots__ = ("_logger",)

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def _log(self, level: int, msg: str, kv: dict[str, object], exc_info: bool = False) -> None:
        if self._logger.isEnabledFor(level):
            self._logger.log(level, msg, extra={"kv": kv}, exc_info=exc_info, stacklevel=3)

    def debug(self, msg: str, **kv: object) -> None:
        self._log(logging.DEBUG, msg, kv)

    def info(self, msg: str, **kv: object) -> None:
        self._log(logging.INFO, msg, kv)

    def warning(self, msg: str, **kv: object) -> None:
        self._log(logging.WARNING, msg, kv)

    def warning_exc(self, msg: str, **kv: object) -> None:
        """A warning with the traceback of the exception being handled."""
        self._log(logging.WARNING, msg, kv, exc_info=True)

    def error(self, msg: str, **kv: object) -> None:
        self._log(logging.ERROR, msg, kv)

    def exception(self, msg: str, **kv: object) -> None:
        self._log(logging.ERROR, msg, kv, exc_info=True)

    def enabled(self, level: int) -> bool:
        return self._logger.isEnabledFor(level)


def get_logger(name: str) -> Log:
    return Log(name)


def setup_logging(verbosity: int = 0, fmt: str = "text", stream: TextIO | None = None) -> None:
    """Configure the root logger once for the process (called by the CLI)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbosity >= 4 else logging.INFO)
    # Library chatter stays out of an operator's log unless asked for.
    for noisy in ("aiohttp", "asyncio", "kubernetes_asyncio"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbosity >= 8 else logging.WARNING)
