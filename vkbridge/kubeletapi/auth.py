"""Kubelet-style authentication and authorization in Webhook mode (technotes §2, kubelet auth.go).

Who: a verified client certificate (user = CN, groups = O), else a bearer token reviewed by the home
API server (TokenReview), else nobody (401; anonymous is off, as on kubelets). What: a
SubjectAccessReview on ``nodes/<subresource>`` named after our node, the verb from the HTTP method and
the subresource(s) from the path, as ``GetRequestAttributes`` of Kubernetes 1.36 does (fine-grained
``pods``/``healthz``/``configz`` first, then ``proxy``). Decisions are cached like the kubelet's: allowed
5 min, denied 30 s, token reviews 2 min, in bounded LRUs. API failures are never cached.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from vkbridge.kube.client import SUBJECTACCESSREVIEWS, TOKENREVIEWS, ApiError, KubeClient
from vkbridge.logs import get_logger

__all__ = [
    "ALLOWED_TTL",
    "DENIED_TTL",
    "TOKEN_TTL",
    "AuthResult",
    "KubeletAuth",
    "TTLCache",
    "UserInfo",
    "is_subpath",
    "subresources_for",
    "user_from_peercert",
    "verb_for",
]

log = get_logger("vkbridge.kubeletapi.auth")

ALLOWED_TTL: Final = 300.0
DENIED_TTL: Final = 30.0
TOKEN_TTL: Final = 120.0
CACHE_SIZE: Final = 4096
AUTHENTICATED: Final = "system:authenticated"

K = TypeVar("K")
V = TypeVar("V")


# ---------------------------------------------------------------------------------------------- mapping


def verb_for(method: str) -> str:
    """The API verb the kubelet derives from an HTTP method ("" for others, which nothing allows)."""
    return {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method.upper(), ""
    )


def is_subpath(subpath: str, path: str) -> bool:
    """kubelet ``isSubpath``: ``subpath`` is ``path`` or below it (``path``'s trailing '/' ignored)."""
    path = path.removesuffix("/")
    return subpath == path or (subpath.startswith(path) and subpath[len(path) : len(path) + 1] == "/")


# The kubelet's two lookups of a request's subresources: (path prefix, subresource), first match wins.
_NAMED_SUBRESOURCES: Final = (
    ("/pods", "pods"),
    ("/healthz", "healthz"),
    ("/configz", "configz"),
    ("/runningpods/", "pods"),
)
_SUBRESOURCES: Final = (
    ("/stats/", "stats"),
    ("/metrics", "metrics"),
    ("/logs/", "log"),
    ("/checkpoint/", "checkpoint"),
    ("/statusz", "statusz"),
    ("/flagz", "configz"),
)


def _first_match(path: str, table: tuple[tuple[str, str], ...]) -> str | None:
    return next((sub for prefix, sub in table if is_subpath(path, prefix)), None)


def subresources_for(path: str) -> list[str]:
    """Subresources tried in order; any allowed one admits the request (1.36, fine-grained authz on)."""
    named = _first_match(path, _NAMED_SUBRESOURCES)
    return [*([named] if named else []), _first_match(path, _SUBRESOURCES) or "proxy"]


# ---------------------------------------------------------------------------------------------- identity


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def sar_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"user": self.name, "groups": list(self.groups)}
        if self.uid:
            spec["uid"] = self.uid
        if self.extra:
            spec["extra"] = {k: list(v) for k, v in self.extra}
        return spec


def _with_authenticated(groups: tuple[str, ...]) -> tuple[str, ...]:
    return groups if AUTHENTICATED in groups else (*groups, AUTHENTICATED)


def user_from_peercert(cert: Mapping[str, Any] | None) -> UserInfo | None:
    """The identity of a *verified* peer certificate (``SSLObject.getpeercert()``): CN and O.

    As Go's ``pkix.Name.FillFromRDNSequence`` (what kube-apiserver and kubelets use): the last CN wins
    and every O is kept, so a certificate with two CNs is the same user here as there.
    """
    if not cert:
        return None
    cn = ""
    orgs: list[str] = []
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                cn = str(value)
            elif key == "organizationName":
                orgs.append(str(value))
    if not cn:
        return None
    return UserInfo(cn, groups=_with_authenticated(tuple(orgs)))


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


# ---------------------------------------------------------------------------------------------- cache


class TTLCache(Generic[K, V]):
    """A bounded LRU whose entries expire after a per-entry TTL (monotonic clock, injectable)."""

    def __init__(self, max_size: int = CACHE_SIZE, clock: Callable[[], float] = time.monotonic) -> None:
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._max = max_size
        self._clock = clock

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: K) -> V | None:
        item = self._data.get(key)
        if item is None:
            return None
        expires, value = item
        if self._clock() >= expires:
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V, ttl: float) -> None:
        self._data[key] = (self._clock() + ttl, value)
        self._data.move_to_end(key)
        while len(self._data) > self._max:
            self._data.popitem(last=False)


# ---------------------------------------------------------------------------------------------- auth


@dataclass(frozen=True)
class AuthResult:
    """``status`` 200 means go ahead; otherwise answer with ``status`` and ``message`` (text/plain)."""

    status: int
    message: str = ""
    user: UserInfo | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass
class _Stats:
    token_reviews: int = 0
    access_reviews: int = 0


class KubeletAuth:
    """Authenticates and authorizes kubelet API requests against the home (consumer) API server."""

    def __init__(
        self,
        home: KubeClient,
        node_name: str,
        *,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self._home = home
        self.node_name = node_name
        self.enabled = enabled
        self._tokens: TTLCache[str, tuple[UserInfo | None]] = TTLCache(cache_size, clock)
        self._decisions: TTLCache[tuple[Any, ...], bool] = TTLCache(cache_size, clock)
        self.stats = _Stats()

    async def check(
        self, method: str, path: str, peercert: Mapping[str, Any] | None, authorization: str | None
    ) -> AuthResult:
        if not self.enabled:
            return AuthResult(200, user=user_from_peercert(peercert))
        try:
            user = await self.authenticate(peercert, authorization)
        except ApiError as exc:
            log.warning("cannot authenticate a kubelet API request", path=path, error=str(exc))
            return AuthResult(401, "Unauthorized")
        if user is None:
            return AuthResult(401, "Unauthorized")
        return await self.authorize(user, method, path)

    async def authenticate(
        self, peercert: Mapping[str, Any] | None, authorization: str | None
    ) -> UserInfo | None:
        """Certificate first, then token; None is "nobody". ApiError when the review itself failed."""
        user = user_from_peercert(peercert)
        if user is not None:
            return user
        token = bearer_token(authorization)
        if token is None:
            return None
        key = hashlib.sha256(token.encode()).hexdigest()  # never keep raw tokens around
        cached = self._tokens.get(key)
        if cached is not None:
            return cached[0]
        user = await self._review_token(token)
        self._tokens.put(key, (user,), TOKEN_TTL)  # like the kubelet: success and failure, 2 min
        return user

    async def _review_token(self, token: str) -> UserInfo | None:
        self.stats.token_reviews += 1
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        result = await self._home.create(TOKENREVIEWS, body)
        status = result.get("status") or {}
        if not status.get("authenticated"):
            return None
        u = status.get("user") or {}
        name = str(u.get("username") or "")
        if not name:
            return None
        extra = tuple(sorted((str(k), tuple(str(x) for x in v)) for k, v in (u.get("extra") or {}).items()))
        return UserInfo(
            name,
            uid=str(u.get("uid") or ""),
            groups=_with_authenticated(tuple(str(g) for g in u.get("groups") or ())),
            extra=extra,
        )

    async def authorize(self, user: UserInfo, method: str, path: str) -> AuthResult:
        verb = verb_for(method)
        subresources = subresources_for(path)
        for sub in subresources:
            try:
                allowed = await self._allowed(user, verb, sub)
            except ApiError as exc:
                log.warning("authorization error", user=user.name, verb=verb, subresource=sub, error=str(exc))
                return AuthResult(
                    500,
                    f"Authorization error (user={user.name}, verb={verb}, resource=nodes, subresource={sub})",
                    user,
                )
            if allowed:
                return AuthResult(200, user=user)
        log.info("forbidden", user=user.name, verb=verb, path=path, subresources=",".join(subresources))
        return AuthResult(
            403,
            f"Forbidden (user={user.name}, verb={verb}, resource=nodes, "
            f"subresource(s)=[{' '.join(subresources)}])\n",
            user,
        )

    async def _allowed(self, user: UserInfo, verb: str, subresource: str) -> bool:
        key = (user, verb, subresource)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached
        if not verb:
            return False
        self.stats.access_reviews += 1
        spec = user.sar_spec()
        spec["resourceAttributes"] = {
            "verb": verb,
            "version": "v1",
            "resource": "nodes",
            "subresource": subresource,
            "name": self.node_name,
        }
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        result = await self._home.create(SUBJECTACCESSREVIEWS, body)
        status = result.get("status") or {}
        allowed = bool(status.get("allowed")) and not status.get("denied")
        self._decisions.put(key, allowed, ALLOWED_TTL if allowed else DENIED_TTL)
        return allowed
