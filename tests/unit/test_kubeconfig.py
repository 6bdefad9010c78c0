"""Kubeconfig parsing: what is accepted, what is refused (and that refusals never leak secrets)."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import functools
import io
import json
import os
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.certs import cert_builder
from vkbridge import doctor
from vkbridge.cli import parse_args
from vkbridge.kube.kubeconfig import (
    Credentials,
    KubeconfigError,
    cert_info,
    in_cluster_credentials,
    load_kubeconfig_file,
    parse_kubeconfig,
    read_token,
    ssl_context,
)

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
TOKEN = "tok-SUPERSECRET-0123456789"


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name(attrs)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
) -> x509.Certificate:
    return (
        cert_builder(
            subject,
            key.public_key(),
            issuer=issuer,
            not_before=NOW - dt.timedelta(minutes=1),
            not_after=NOW + dt.timedelta(days=1),
            serial=4242,
        )
        .add_extension(x509.BasicConstraints(ca=subject == issuer, path_length=None), critical=True)
        .sign(issuer_key, hashes.SHA256())
    )


@pytest.fixture(scope="module")
def pki() -> dict[str, bytes]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("test-ca")
    ca = _cert(ca_name, ca_key, ca_name, ca_key)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert(_name("vk-user", ("liqo", "system:nodes")), key, ca_name, ca_key)
    other_key = ec.generate_private_key(ec.SECP256R1())
    return {
        "ca": ca.public_bytes(serialization.Encoding.PEM),
        "cert": cert.public_bytes(serialization.Encoding.PEM),
        "key": _pem_key(key),
        "other_key": _pem_key(other_key),
    }


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def kubeconfig(
    pki: dict[str, bytes], *, cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None
) -> dict[str, Any]:
    c: dict[str, Any] = {"server": "https://127.0.0.1:6443", "certificate-authority-data": _b64(pki["ca"])}
    u: dict[str, Any] = {"client-certificate-data": _b64(pki["cert"]), "client-key-data": _b64(pki["key"])}
    c.update(cluster or {})
    u.update(user or {})
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ctx",
        "contexts": [
            {"name": "other", "context": {"cluster": "nope", "user": "nope"}},
            {"name": "ctx", "context": {"cluster": "c", "user": "u"}},
        ],
        "clusters": [{"name": "c", "cluster": {k: v for k, v in c.items() if v is not None}}],
        "users": [{"name": "u", "user": {k: v for k, v in u.items() if v is not None}}],
    }


def refused(config: Any, **kw: Any) -> str:
    with pytest.raises(KubeconfigError) as ei:
        parse_kubeconfig(config, **kw)
    return str(ei.value)


# ---------------------------------------------------------------------------------------------- accepted


def test_client_certificate_from_dict_yaml_and_json(pki: dict[str, bytes]) -> None:
    cfg = kubeconfig(pki)
    for form in (cfg, yaml.safe_dump(cfg), json.dumps(cfg), json.dumps(cfg).encode()):
        creds = parse_kubeconfig(form)
        assert creds.server == "https://127.0.0.1:6443"
        assert creds.ca_pem == pki["ca"]
        assert creds.client_cert_pem == pki["cert"]
        assert creds.client_key_pem == pki["key"]
        assert creds.token is None
        assert creds.auth_kind == "client-certificate"


def test_trailing_slash_proxy_and_tls_server_name(pki: dict[str, bytes]) -> None:
    cfg = kubeconfig(
        pki,
        cluster={
            "server": "https://pool.example:443/",
            "proxy-url": "http://user:pw@proxy:3128",
            "tls-server-name": "kubernetes.default",
        },
    )
    creds = parse_kubeconfig(cfg)
    assert creds.server == "https://pool.example:443"
    assert creds.proxy_url == "http://user:pw@proxy:3128"
    assert creds.tls_server_name == "kubernetes.default"
    assert "pw" not in repr(creds)


def test_explicit_context_wins(pki: dict[str, bytes]) -> None:
    msg = refused(kubeconfig(pki), context="other")
    assert "unknown cluster 'nope'" in msg


def test_bearer_token(pki: dict[str, bytes]) -> None:
    creds = parse_kubeconfig(
        kubeconfig(pki, user={"client-certificate-data": None, "client-key-data": None, "token": TOKEN})
    )
    assert creds.token == TOKEN
    assert creds.client_cert_pem is None
    assert creds.auth_kind == "token"


def test_files_resolve_relative_to_the_kubeconfig(pki: dict[str, bytes], tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(pki["ca"])
    (tmp_path / "token").write_text(TOKEN + "\n")
    cfg = kubeconfig(
        pki,
        cluster={"certificate-authority-data": None, "certificate-authority": "ca.crt"},
        user={"client-certificate-data": None, "client-key-data": None, "tokenFile": "token"},
    )
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    creds = load_kubeconfig_file(path)
    assert creds.ca_pem == pki["ca"]
    assert creds.token == TOKEN
    assert creds.token_file == str(tmp_path / "token")
    assert creds.auth_kind == "token-file"


def test_in_cluster(pki: dict[str, bytes], tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(pki["ca"])
    (tmp_path / "token").write_text(TOKEN)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    creds = in_cluster_credentials(tmp_path, env)
    assert creds.server == "https://[fd00::1]:443"
    assert creds.token == TOKEN
    assert creds.token_file == str(tmp_path / "token")
    env4 = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster_credentials(tmp_path, env4).server == "https://10.96.0.1:443"
    with pytest.raises(KubeconfigError, match="not in a cluster"):
        in_cluster_credentials(tmp_path, {})


# ---------------------------------------------------------------------------------------------- refused


def test_insecure_skip_tls_verify_is_refused(pki: dict[str, bytes]) -> None:
    msg = refused(kubeconfig(pki, cluster={"insecure-skip-tls-verify": True}))
    assert msg == (
        "refusing kubeconfig: insecure-skip-tls-verify is set; "
        "vkbridge always verifies the pool's certificate"
    )


@pytest.mark.parametrize(
    ("cluster", "user", "needle"),
    [
        ({"server": "http://127.0.0.1:8080"}, {}, "server must be https"),
        ({"server": None}, {}, "no server URL"),
        ({"certificate-authority-data": None}, {}, "no certificate-authority"),
        ({"certificate-authority-data": _b64(b"not a cert")}, {}, "not a valid PEM certificate"),
        ({"certificate-authority-data": "%%%"}, {}, "not valid base64"),
        ({"proxy-url": "socks5://proxy:1080"}, {}, "proxy-url scheme 'socks5'"),
        ({}, {"client-certificate-data": None, "client-key-data": None}, "no credentials"),
        ({}, {"client-key-data": None}, "must be given together"),
        ({}, {"exec": {"command": "aws"}}, "exec credential plugins are not supported"),
        ({}, {"auth-provider": {"name": "gcp"}}, "auth-provider plugins are not supported"),
        ({}, {"client-certificate-data": _b64(b"garbage")}, "client certificate is not a valid PEM"),
    ],
)
def test_refusals(pki: dict[str, bytes], cluster: dict[str, Any], user: dict[str, Any], needle: str) -> None:
    assert needle in refused(kubeconfig(pki, cluster=cluster, user=user))


def test_structural_errors(pki: dict[str, bytes]) -> None:
    assert "not valid YAML" in refused("a: [unclosed")
    assert "not a mapping" in refused("- a\n- b\n")
    cfg = kubeconfig(pki)
    cfg["current-context"] = "missing"
    assert "context 'missing' not found" in refused(cfg)


def test_bad_key_never_echoes_key_material(pki: dict[str, bytes]) -> None:
    secret = b"SUPERSECRETKEYMATERIAL"
    bogus = b"-----BEGIN PRIVATE KEY-----\n" + base64.b64encode(secret * 3) + b"\n-----END PRIVATE KEY-----\n"
    with pytest.raises(KubeconfigError) as ei:
        parse_kubeconfig(kubeconfig(pki, user={"client-key-data": _b64(bogus)}))
    text = str(ei.value) + repr(ei.value.__cause__) + repr(ei.value.__context__)
    assert "client key is not a valid" in str(ei.value)
    assert "SUPERSECRET" not in text and base64.b64encode(secret).decode()[:12] not in text
    assert ei.value.__cause__ is None and ei.value.__suppress_context__


def test_mismatched_key_is_refused(pki: dict[str, bytes]) -> None:
    msg = refused(kubeconfig(pki, user={"client-key-data": _b64(pki["other_key"])}))
    assert "does not match" in msg


# ---------------------------------------------------------------------------------------------- repr, TLS


def test_repr_never_shows_key_or_token(pki: dict[str, bytes]) -> None:
    creds = parse_kubeconfig(kubeconfig(pki, user={"token": TOKEN}))
    text = repr(creds) + str(creds)
    key_body = pki["key"].decode().splitlines()[1]
    assert TOKEN not in text
    assert key_body not in text
    assert "cn='vk-user'" in text


def test_cert_info(pki: dict[str, bytes]) -> None:
    info = cert_info(pki["cert"])
    assert info.serial == 4242
    assert info.cn == "vk-user"
    assert info.orgs == ("liqo", "system:nodes")
    assert info.not_before == NOW - dt.timedelta(minutes=1)
    assert info.not_after == NOW + dt.timedelta(days=1)
    assert info.not_after.tzinfo is not None
    serial, _nb, _na, cn, orgs = info
    assert (serial, cn, orgs) == (4242, "vk-user", ("liqo", "system:nodes"))
    with pytest.raises(ValueError):
        cert_info(b"nope")


def test_ssl_context_always_verifies(pki: dict[str, bytes]) -> None:
    ctx = ssl_context(parse_kubeconfig(kubeconfig(pki)))
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.check_hostname is True
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "test-ca"),),)]
    token_ctx = ssl_context(
        parse_kubeconfig(
            kubeconfig(pki, user={"client-certificate-data": None, "client-key-data": None, "token": TOKEN})
        )
    )
    assert token_ctx.verify_mode == ssl.CERT_REQUIRED


def test_ssl_context_rejects_mismatched_pair_without_leaking(pki: dict[str, bytes]) -> None:
    creds = Credentials(
        server="https://x:1", ca_pem=pki["ca"], client_cert_pem=pki["cert"], client_key_pem=pki["other_key"]
    )
    with pytest.raises(KubeconfigError) as ei:
        ssl_context(creds)
    assert "cannot be loaded" in str(ei.value)
    assert ei.value.__cause__ is None


# ---------------------------------------------------------------------------------------------- local files
# Issue 15 item 6: a kubeconfig from a Secret must not make vkbridge read local files; the operator's own
# kubeconfig may, but a FIFO or device must be refused rather than waited on.

MARKER = "MARKER-TOKEN-0a1b2c3d4e5f"


def _release(fifo: Path) -> None:
    """Unblock anyone stuck reading ``fifo`` (the old code's open() waits for a writer)."""
    for _ in range(50):
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader has it open
            return
        os.close(fd)
        time.sleep(0.01)


def finishes(fn: Callable[[], Any], fifos: list[Path], timeout: float = 5.0) -> dict[str, Any]:
    """Run ``fn`` in a daemon thread; fail if it is still running after ``timeout`` (blocked on a FIFO)."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:  # handed back to the test
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    hung = thread.is_alive()
    for fifo in fifos:
        _release(fifo)
    thread.join(5)
    assert not hung, "blocked reading a FIFO"
    return result


@pytest.mark.parametrize(
    ("section", "field_name"),
    [
        ("user", "tokenFile"),
        ("user", "client-certificate"),
        ("user", "client-key"),
        ("cluster", "certificate-authority"),
    ],
)
def test_secret_kubeconfig_naming_a_local_file_is_refused_naming_the_field(
    pki: dict[str, bytes], tmp_path: Path, section: str, field_name: str
) -> None:
    marker = tmp_path / "token"
    marker.write_text(MARKER)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (marker, fifo):
        extra = {field_name: str(target)}
        cfg = kubeconfig(pki, **{section: extra})
        got = finishes(functools.partial(parse_kubeconfig, cfg, source="Secret t/kubeconfig"), [fifo])
        err = got.get("error")
        assert isinstance(err, KubeconfigError), got
        msg = str(err)
        assert msg.startswith("Secret t/kubeconfig: refusing kubeconfig:")
        assert f"sets {field_name}, a local file path" in msg and "never opens the file" in msg
        assert MARKER not in msg


def test_secret_kubeconfig_token_file_never_becomes_the_bearer(pki: dict[str, bytes], tmp_path: Path) -> None:
    marker = tmp_path / "token"
    marker.write_text(MARKER)
    cfg = kubeconfig(
        pki, user={"client-certificate-data": None, "client-key-data": None, "tokenFile": str(marker)}
    )
    with pytest.raises(KubeconfigError, match="sets tokenFile"):
        parse_kubeconfig(cfg)
    # Even with an inline token next to it: the file would win at request time, so it is refused too.
    cfg["users"][0]["user"]["token"] = TOKEN
    with pytest.raises(KubeconfigError, match="sets tokenFile"):
        parse_kubeconfig(yaml.safe_dump(cfg))


def test_operator_kubeconfig_naming_a_fifo_is_refused_not_waited_on(
    pki: dict[str, bytes], tmp_path: Path
) -> None:
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    cfg = kubeconfig(
        pki, user={"client-certificate-data": None, "client-key-data": None, "tokenFile": "token"}
    )
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    got = finishes(lambda: load_kubeconfig_file(path), [fifo])
    assert isinstance(got.get("error"), KubeconfigError) and "not a regular file" in str(got["error"])
    # The kubeconfig itself as a FIFO ($KUBECONFIG pointing at one).
    os.unlink(fifo)
    os.mkfifo(fifo)
    got = finishes(lambda: load_kubeconfig_file(fifo), [fifo])
    assert isinstance(got.get("error"), KubeconfigError) and "not a regular file" in str(got["error"])
    with pytest.raises(KubeconfigError, match="not a regular file"):
        read_token("/dev/zero")


def test_doctor_with_a_fifo_kubeconfig_fails_fast_without_freezing(tmp_path: Path) -> None:
    fifo = tmp_path / "kubeconfig"
    os.mkfifo(fifo)
    settings = parse_args([f"--home-kubeconfig={fifo}", "--nodename=n1"], env={}, command="doctor")
    out = io.StringIO()
    got = finishes(lambda: asyncio.run(doctor._run(settings, out)), [fifo])
    assert got.get("value") == 1, got
    assert "FAIL  consumer kubeconfig" in out.getvalue() and "not a regular file" in out.getvalue()


# ---------------------------------------------------------------------------------------------- server URL
# Issue 15 item 7: userinfo, a query or a fragment in the server URL are refused, never echoed.


@pytest.mark.parametrize(
    ("server", "needle"),
    [
        ("https://admin:s3cr3t-pw@pool.example:6443", "carries userinfo"),
        ("https://s3cr3t-pw@pool.example:6443/prefix", "carries userinfo"),
        ("http://admin:s3cr3t-pw@pool.example", "carries userinfo"),
        ("https://admin:s3cr3t/pw@pool.example", "carries userinfo"),
        ("https://admin:s3cr3t?pw@pool.example", "carries userinfo"),
        ("https://pool.example:6443?s3cr3t-pw=1", "has a query or fragment"),
        ("https://pool.example:6443/?", "has a query or fragment"),
        ("https://pool.example:6443#s3cr3t-pw", "has a query or fragment"),
        ("https://pool.example:6443\r\nX-Evil: s3cr3t-pw", "whitespace or control characters"),
        ("https://:6443", "has no host"),
        ("https://pool.example:99999", "invalid port"),
    ],
)
def test_server_url_with_userinfo_query_or_fragment_is_refused_without_echoing_it(
    pki: dict[str, bytes], server: str, needle: str
) -> None:
    msg = refused(kubeconfig(pki, cluster={"server": server}), source="Secret t/kubeconfig")
    assert needle in msg
    assert "s3cr3t" not in msg and "admin" not in msg


def test_server_url_with_a_path_prefix_is_kept(pki: dict[str, bytes]) -> None:
    creds = parse_kubeconfig(kubeconfig(pki, cluster={"server": "https://[fd00::1]:6443/k8s/clusters/c1/"}))
    assert creds.server == "https://[fd00::1]:6443/k8s/clusters/c1"


def test_spdy_host_header_never_carries_userinfo() -> None:
    from vkbridge.kubeletapi.streams.spdyclient import host_header  # new in this fix: imported here

    assert host_header("https://admin:s3cr3t@pool.example:6443/prefix") == "pool.example:6443"
    assert host_header("https://pool.example") == "pool.example"
    assert host_header("https://[fd00::1]:443") == "[fd00::1]:443"


# ---------------------------------------------------------------------------------------------- hot swap
# Issue 35 item 8: a Secret edit that changes only tls-server-name or proxy-url is a change to swap in.


class _SwapPool:
    """The pool client's credential seam (``credentials``, ``swap_credentials``), in memory."""

    def __init__(self, creds: Credentials) -> None:
        self.credentials = creds
        self.swapped = asyncio.Event()

    async def swap_credentials(self, creds: Credentials) -> None:
        self.credentials = creds
        self.swapped.set()


class _SecretFeed:
    """The Secret cache's change feed: the watcher subscribes, the test publishes."""

    def __init__(self) -> None:
        self.handlers: list[Callable[[str, Any, Any], None]] = []

    def subscribe(self, handler: Callable[[str, Any, Any], None]) -> Callable[[], None]:
        self.handlers.append(handler)
        return lambda: None

    def publish(self, config: dict[str, Any]) -> None:
        secret = {"data": {"kubeconfig": _b64(json.dumps(config).encode())}}
        for handler in self.handlers:
            handler("MODIFIED", None, secret)


PROXY_PASSWORD = "proxy-PASSWORD-9f8e7d"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"tls-server-name": "pool.internal"}, "tls_server_name"),
        ({"proxy-url": f"http://ops:{PROXY_PASSWORD}@proxy.internal:3128"}, "proxy_url"),
    ],
)
async def test_a_secret_edit_of_only_tls_server_name_or_proxy_url_is_swapped_in_without_a_restart(
    pki: dict[str, bytes], edit: dict[str, str], field: str, caplog: pytest.LogCaptureFixture
) -> None:
    from vkbridge.credentials.remote import RemoteCredentialWatcher
    from vkbridge.logs import TextFormatter

    caplog.set_level("DEBUG")
    pool = _SwapPool(parse_kubeconfig(kubeconfig(pki), source="Secret t/kubeconfig"))
    feed = _SecretFeed()
    watcher = RemoteCredentialWatcher(pool, feed, "t/kubeconfig")  # type: ignore[arg-type]
    task = asyncio.create_task(watcher.run())
    try:
        feed.publish(kubeconfig(pki))  # the same content again: nothing to swap
        feed.publish(kubeconfig(pki, cluster=edit))
        await asyncio.wait_for(pool.swapped.wait(), 2.0)
    finally:
        task.cancel()
    assert getattr(pool.credentials, field) == next(iter(edit.values())) and watcher.swaps == 1
    text = "\n".join(TextFormatter().format(r) for r in caplog.records)
    assert "pool credential swapped" in text and f"changed={field}" in text
    assert PROXY_PASSWORD not in text and TOKEN not in text and "PRIVATE KEY" not in text
