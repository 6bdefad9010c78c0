"""What a request to the API is, for counting: verb and resource from method and path (pure), and the sink
``KubeClient`` reports each request to once it has an answer (``vkbridge_api_requests_total``), with its
duration (``vkbridge_api_request_duration_seconds``, by verb) and its wait for the client's rate limiter
(``vkbridge_api_rate_limiter_wait_seconds``): client-go's ``rest_client_request_duration_seconds`` and
``rest_client_rate_limiter_duration_seconds``.

Labels stay bounded: the resource is the plural from the path (``pods``, ``shadowpods``, ``leases``) with
a subresource as ``pods/status``, never a name or namespace; a path outside ``/api`` and ``/apis`` keeps
its first segment only (``livez``, ``version``); ``code`` is the HTTP status, or ``error`` when no HTTP
answer came (transport failure, timeout, a request we abandoned or cancelled).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Protocol

__all__ = [
    "APPLY_PATCH",
    "ERROR_CODE",
    "Params",
    "RequestCounter",
    "RequestHistogram",
    "RequestMetrics",
    "classify",
    "code_label",
]

APPLY_PATCH: Final = "application/apply-patch+yaml"
ERROR_CODE: Final = "error"

Params = Mapping[str, "str | int | bool | float | Sequence[str] | None"]


def classify(
    method: str, path: str, params: Params | None = None, content_type: str | None = None
) -> tuple[str, str]:
    """(Kubernetes verb, resource[/subresource]) of a request, for ``KubeClient.stats`` and the metric."""
    segs = [s for s in path.split("?", 1)[0].split("/") if s]
    if segs[:1] == ["api"]:
        segs = segs[2:]
    elif segs[:1] == ["apis"]:
        segs = segs[3:]
    else:
        return method.lower(), "/".join(segs[:1])
    if len(segs) >= 3 and segs[0] == "namespaces" and segs[2] not in ("status", "finalize"):
        segs = segs[2:]
    resource = segs[0] if segs else ""
    named = len(segs) >= 2
    if len(segs) >= 3:
        resource += "/" + segs[2]
    m = method.upper()
    if m == "GET":
        watching = params is not None and _truthy(params.get("watch"))
        verb = "watch" if watching else ("get" if named else "list")
    elif m == "POST":
        verb = "create"
    elif m == "PUT":
        verb = "update"
    elif m == "PATCH":
        verb = "apply" if content_type == APPLY_PATCH else "patch"
    elif m == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = m.lower()
    return verb, resource


def _truthy(v: object) -> bool:
    return v is True or (isinstance(v, str) and v.lower() in ("true", "1"))


def code_label(status: int | None) -> str:
    """The ``code`` label: the HTTP status, or ``error`` for no HTTP answer."""
    return str(status) if status else ERROR_CODE


class _Child(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class _Observer(Protocol):
    def observe(self, amount: float) -> None: ...


class RequestCounter(Protocol):
    """What this needs of a prometheus_client ``Counter`` with labels (server, verb, resource, code)."""

    def labels(self, *values: str) -> _Child: ...


class RequestHistogram(Protocol):
    """What this needs of a prometheus_client ``Histogram`` with labels."""

    def labels(self, *values: str) -> _Observer: ...


class RequestMetrics:
    """One client's view of the request counter: ``server`` is the client's name (consumer, pool).

    Each label set's child is looked up once and kept (``labels()`` validates and locks on every call, 2-3%
    of the VK's busy time at 20 pods/s); the sets are few (the labels are bounded), so is the dict."""

    __slots__ = ("_children", "_counter", "_durations", "_latency", "_server", "_throttle", "_waits")

    def __init__(
        self,
        counter: RequestCounter | None,
        server: str,
        latency: RequestHistogram | None = None,
        throttle: RequestHistogram | None = None,
    ) -> None:
        self._counter, self._server = counter, server
        self._latency, self._throttle = latency, throttle
        self._children: dict[tuple[str, str, int | None], _Child] = {}
        self._durations: dict[str, _Observer] = {}
        self._waits: _Observer | None = None

    def observe(self, key: tuple[str, str], status: int | None, seconds: float | None = None) -> None:
        """One request answered with ``status`` (None: no HTTP answer) after ``seconds`` on the wire
        (a watch or stream: until its headers). A watch counts once, when opened."""
        if self._counter is not None:
            labels = (key[0], key[1], status)
            child = self._children.get(labels)
            if child is None:
                child = self._counter.labels(self._server, key[0], key[1], code_label(status))
                self._children[labels] = child
            child.inc()
        if seconds is not None and self._latency is not None:
            duration = self._durations.get(key[0])
            if duration is None:
                duration = self._durations[key[0]] = self._latency.labels(self._server, key[0])
            duration.observe(seconds)

    def waited(self, seconds: float) -> None:
        """One request's wait for the client-side rate limiter (0 when a token was there)."""
        if self._throttle is None:
            return
        if self._waits is None:
            self._waits = self._throttle.labels(self._server)
        self._waits.observe(seconds)
