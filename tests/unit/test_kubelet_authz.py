"""Kubelet-style authn/authz of the kubelet API (vkbridge.kubeletapi.auth): mapping, caching, results."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.clock import FakeClock
from vkbridge.kube.client import SUBJECTACCESSREVIEWS, TOKENREVIEWS, ApiError, Resource, TransportError
from vkbridge.kubeletapi.auth import (
    ALLOWED_TTL,
    DENIED_TTL,
    TOKEN_TTL,
    KubeletAuth,
    TTLCache,
    UserInfo,
    is_subpath,
    subresources_for,
    user_from_peercert,
    verb_for,
)


@pytest.mark.parametrize(
    ("method", "verb"),
    [("GET", "get"), ("POST", "create"), ("PUT", "update"), ("PATCH", "patch"), ("DELETE", "delete"),
     ("get", "get"), ("HEAD", ""), ("OPTIONS", "")],
)  # fmt: skip
def test_verb_from_method(method: str, verb: str) -> None:
    assert verb_for(method) == verb


@pytest.mark.parametrize(
    ("path", "subresources"),
    [
        ("/pods", ["pods", "proxy"]),
        ("/pods/", ["pods", "proxy"]),
        ("/podsx", ["proxy"]),
        ("/runningpods/", ["pods", "proxy"]),
        ("/runningpods", ["pods", "proxy"]),
        ("/healthz", ["healthz", "proxy"]),
        ("/healthz/ping", ["healthz", "proxy"]),
        ("/configz", ["configz", "proxy"]),
        ("/stats/summary", ["stats"]),
        ("/stats", ["stats"]),
        ("/statsfoo", ["proxy"]),
        ("/metrics", ["metrics"]),
        ("/metrics/cadvisor", ["metrics"]),
        ("/metrics/resource", ["metrics"]),
        ("/logs/syslog", ["log"]),
        ("/checkpoint/ns/pod/c", ["checkpoint"]),
        ("/statusz", ["statusz"]),
        ("/flagz", ["configz"]),
        ("/containerLogs/ns/pod/c", ["proxy"]),  # kubectl logs is nodes/proxy, not nodes/log
        ("/exec/ns/pod/c", ["proxy"]),
        ("/attach/ns/pod/c", ["proxy"]),
        ("/portForward/ns/pod", ["proxy"]),
        ("/run/ns/pod/c", ["proxy"]),
        ("/", ["proxy"]),
    ],
)
def test_subresources_follow_kubelet_136(path: str, subresources: list[str]) -> None:
    assert subresources_for(path) == subresources


def test_is_subpath() -> None:
    assert is_subpath("/stats", "/stats/")
    assert is_subpath("/stats/x", "/stats/")
    assert not is_subpath("/statsx", "/stats/")
    assert not is_subpath("/", "/stats/")


def test_user_from_verified_peer_certificate() -> None:
    cert = {
        "subject": (
            (("organizationName", "system:masters"),),
            (("organizationName", "team-a"),),
            (("commonName", "kube-apiserver-kubelet-client"),),
        )
    }
    assert user_from_peercert(cert) == UserInfo(
        "kube-apiserver-kubelet-client", groups=("system:masters", "team-a", "system:authenticated")
    )
    assert user_from_peercert(None) is None
    assert user_from_peercert({}) is None
    assert user_from_peercert({"subject": ((("organizationName", "x"),),)}) is None  # no CN, no user


def test_a_certificate_with_two_common_names_is_the_last_one_as_in_go() -> None:
    """Go's pkix.Name.FillFromRDNSequence overwrites CommonName at each CN and appends every O:
    kube-apiserver (and a kubelet) see the last CN, so we must too, or one certificate is two users."""
    cert = {
        "subject": (
            (("commonName", "system:anonymous-looking"),),
            (("organizationName", "team-a"),),
            (("commonName", "alice"), ("organizationName", "team-b")),  # a multi-valued RDN
        )
    }
    assert user_from_peercert(cert) == UserInfo("alice", groups=("team-a", "team-b", "system:authenticated"))
    empty_last = {"subject": ((("commonName", "alice"),), (("commonName", ""),))}
    assert user_from_peercert(empty_last) is None  # Go's last CN is empty: no user, as the apiserver says


def test_ttl_cache_expiry_and_lru_bound() -> None:
    clock = FakeClock()
    c: TTLCache[str, int] = TTLCache(max_size=2, clock=clock)
    c.put("a", 1, 10)
    c.put("b", 2, 100)
    assert c.get("a") == 1  # refreshes a's recency
    c.put("c", 3, 100)  # evicts b, the least recently used
    assert c.get("b") is None and c.get("a") == 1 and c.get("c") == 3
    clock.now += 10
    assert c.get("a") is None  # expired exactly at its TTL
    assert c.get("c") == 3
    assert len(c) == 1


class FakeHome:
    """Answers TokenReview/SubjectAccessReview from tables; records every call."""

    def __init__(self) -> None:
        self.tokens: dict[str, dict[str, Any]] = {}
        self.allow: set[tuple[str, str, str]] = set()  # (user, verb, subresource)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: ApiError | None = None

    async def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> Any:
        self.calls.append((resource.plural, body))
        if self.fail is not None:
            raise self.fail
        if resource is TOKENREVIEWS:
            user = self.tokens.get(body["spec"]["token"])
            return {"status": {"authenticated": True, "user": user} if user else {"authenticated": False}}
        assert resource is SUBJECTACCESSREVIEWS
        spec = body["spec"]
        ra = spec["resourceAttributes"]
        assert (ra["resource"], ra["version"], ra["name"]) == ("nodes", "v1", "vnode")
        return {"status": {"allowed": (spec["user"], ra["verb"], ra["subresource"]) in self.allow}}

    def count(self, plural: str) -> int:
        return sum(1 for p, _ in self.calls if p == plural)


def make(home: FakeHome, clock: FakeClock | None = None) -> KubeletAuth:
    return KubeletAuth(home, "vnode", clock=clock or FakeClock())  # type: ignore[arg-type]


async def test_no_credentials_is_401() -> None:
    home = FakeHome()
    res = await make(home).check("GET", "/pods", None, None)
    assert (res.status, res.message) == (401, "Unauthorized")
    res = await make(home).check("GET", "/pods", None, "Basic dXNlcjpwYXNz")
    assert res.status == 401
    assert home.calls == []


async def test_certificate_user_is_authorized_with_fine_grained_fallback() -> None:
    home = FakeHome()
    home.allow.add(("alice", "get", "proxy"))
    auth = make(home)
    cert = {"subject": ((("commonName", "alice"),), (("organizationName", "devs"),))}
    res = await auth.check("GET", "/pods", cert, "Bearer ignored-when-a-cert-is-present")
    assert res.ok and res.user == UserInfo("alice", groups=("devs", "system:authenticated"))
    sars = [b["spec"] for p, b in home.calls if p == "subjectaccessreviews"]
    assert [s["resourceAttributes"]["subresource"] for s in sars] == ["pods", "proxy"]
    assert sars[0]["user"] == "alice" and sars[0]["groups"] == ["devs", "system:authenticated"]
    assert home.count("tokenreviews") == 0


async def test_token_user_denied_gets_the_kubelet_message() -> None:
    home = FakeHome()
    home.tokens["t0k"] = {
        "username": "system:serviceaccount:ns:sa",
        "uid": "u-1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["p"]},
    }
    res = await make(home).check("POST", "/exec/ns/p/c", None, "Bearer t0k")
    assert res.status == 403
    assert res.message == (
        "Forbidden (user=system:serviceaccount:ns:sa, verb=create, resource=nodes, subresource(s)=[proxy])\n"
    )
    sar = next(b["spec"] for p, b in home.calls if p == "subjectaccessreviews")
    assert sar["uid"] == "u-1" and sar["extra"] == {"authentication.kubernetes.io/pod-name": ["p"]}
    assert sar["groups"].count("system:authenticated") == 1
    res = await make(home).check("GET", "/healthz", None, "Bearer t0k")
    assert "subresource(s)=[healthz proxy]" in res.message


async def test_unknown_token_is_401_and_cached() -> None:
    home = FakeHome()
    auth = make(home)
    for _ in range(3):
        assert (await auth.check("GET", "/pods", None, "Bearer nope")).status == 401
    assert home.count("tokenreviews") == 1


async def test_decision_and_token_caches_honour_their_ttls() -> None:
    clock = FakeClock()
    home = FakeHome()
    home.tokens["tok"] = {"username": "bob", "groups": []}
    auth = make(home, clock)
    # denied: cached 30 s
    assert (await auth.check("GET", "/containerLogs/a/b/c", None, "Bearer tok")).status == 403
    assert (await auth.check("GET", "/containerLogs/a/b/c", None, "Bearer tok")).status == 403
    assert home.count("subjectaccessreviews") == 1
    home.allow.add(("bob", "get", "proxy"))
    clock.now += DENIED_TTL - 1
    assert (await auth.check("GET", "/containerLogs/a/b/c", None, "Bearer tok")).status == 403
    clock.now += 1
    assert (await auth.check("GET", "/containerLogs/a/b/c", None, "Bearer tok")).ok
    assert home.count("subjectaccessreviews") == 2
    # allowed: cached 5 min, even after the permission is revoked
    home.allow.clear()
    clock.now += ALLOWED_TTL - 1
    assert (await auth.check("GET", "/containerLogs/a/b/c", None, "Bearer tok")).ok
    assert home.count("tokenreviews") == 2  # the token review (2 min) had expired meanwhile
    clock.now += 1
    assert (await auth.check("GET", "/containerLogs/a/b/c", None, "Bearer tok")).status == 403
    assert home.count("subjectaccessreviews") == 3


async def test_token_review_cache_expires_after_two_minutes() -> None:
    clock = FakeClock()
    home = FakeHome()
    home.tokens["tok"] = {"username": "bob"}
    home.allow.add(("bob", "get", "stats"))
    auth = make(home, clock)
    assert (await auth.check("GET", "/stats/summary", None, "Bearer tok")).ok
    clock.now += TOKEN_TTL - 1
    assert (await auth.check("GET", "/stats/summary", None, "Bearer tok")).ok
    assert home.count("tokenreviews") == 1
    clock.now += 1
    assert (await auth.check("GET", "/stats/summary", None, "Bearer tok")).ok
    assert home.count("tokenreviews") == 2


async def test_api_failures_are_not_cached() -> None:
    home = FakeHome()
    home.tokens["tok"] = {"username": "bob"}
    home.allow.add(("bob", "get", "proxy"))
    auth = make(home)
    home.fail = TransportError("connection refused")
    assert (await auth.check("GET", "/exec/a/b/c", None, "Bearer tok")).status == 401  # authn error
    home.fail = None
    assert (await auth.check("GET", "/exec/a/b/c", None, "Bearer tok")).ok  # reviewed again
    cert = {"subject": ((("commonName", "carol"),),)}
    home.fail = ApiError(500, "InternalError", "etcd down")
    res = await auth.check("GET", "/exec/a/b/c", cert, None)
    assert res.status == 500
    assert res.message == "Authorization error (user=carol, verb=get, resource=nodes, subresource=proxy)"
    home.fail = None
    home.allow.add(("carol", "get", "proxy"))
    assert (await auth.check("GET", "/exec/a/b/c", cert, None)).ok


async def test_disabled_authorization_admits_everyone() -> None:
    home = FakeHome()
    auth = KubeletAuth(home, "vnode", enabled=False)  # type: ignore[arg-type]
    assert (await auth.check("POST", "/exec/a/b/c", None, None)).ok
    assert home.calls == []
