"""A deep copy for decoded JSON, the forge's one copying primitive."""

from __future__ import annotations

import copy
from typing import Any, Final, TypeVar, cast

T = TypeVar("T")

JSON_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def json_copy(value: T) -> T:
    """``copy.deepcopy`` for what the caches hold (dicts, lists, strings, numbers, booleans, None), 4-5x
    faster: no memo and no per-type dispatch, so forging a ShadowPod or a status is not mostly copying.
    Anything else (a tuple, a datetime, a dict subclass) goes to ``copy.deepcopy``: same result."""
    return cast(T, _copy(value))


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: _copy(v) for k, v in value.items()}
    if kind is list:
        return [_copy(v) for v in value]
    if kind in JSON_SCALARS:
        return value
    return copy.deepcopy(value)
