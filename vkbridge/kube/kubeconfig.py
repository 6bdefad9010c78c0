"""Kubeconfig parsing into immutable, verified credentials, and the TLS context built from them.

Everything here is pure except the helpers that read files (``load_kubeconfig_file``, its file
references, ``in_cluster_credentials``, ``read_token``). Key material and tokens never appear in
``repr()``, in exception messages or in logs.

Only the operator's own kubeconfig file may name local files (``allow_files=True``): a kubeconfig that
arrives in a Secret is someone else's input, and a ``tokenFile: /var/run/secrets/.../token`` there would
make us send our own ServiceAccount token to the server it names. Local files are read only when they
are regular files of bounded size, opened non-blocking, so a FIFO or ``/dev/zero`` cannot hang a thread.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import ipaddress
import os
import ssl
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple
from urllib.parse import urlsplit

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import NameOID

from vkbridge.kube.execplugin import ExecCredential, ExecPluginError, run_exec_plugin

__all__ = [
    "FILE_FIELDS",
    "SA_DIR",
    "CertInfo",
    "Credentials",
    "KubeconfigError",
    "cert_info",
    "cert_info_of",
    "in_cluster_credentials",
    "load_kubeconfig_doc",
    "load_kubeconfig_file",
    "parse_kubeconfig",
    "read_token",
    "ssl_context",
]

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_SUPPORTED_PROXY_SCHEMES = ("http", "https")
MAX_FILE_BYTES: Final = 1 << 20  # a kubeconfig, certificate or token is far smaller
# Every kubeconfig field that makes a client read a local file (clientcmd v1), per section. The
# plugin sections (exec, auth-provider) run commands or read files and are refused everywhere.
FILE_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "cluster": ("certificate-authority",),
    "user": ("client-certificate", "client-key", "tokenFile"),
}


class KubeconfigError(ValueError):
    """A kubeconfig vkbridge will not use; the message says why and never contains secrets."""


@dataclass(frozen=True, repr=False)
class Credentials:
    """Where the API server is and how we prove who we are; verified TLS only.

    ``token_file`` (service-account or kubeconfig ``tokenFile``) wins over ``token`` at request time:
    projected tokens rotate, so the client re-reads the file periodically.
    """

    server: str
    ca_pem: bytes
    client_cert_pem: bytes | None = field(default=None)
    client_key_pem: bytes | None = field(default=None)
    token: str | None = field(default=None)
    token_file: str | None = None
    proxy_url: str | None = None
    tls_server_name: str | None = None
    source: str = "kubeconfig"

    @property
    def auth_kind(self) -> str:
        if self.client_cert_pem is not None:
            return "client-certificate"
        if self.token_file is not None:
            return "token-file"
        return "token"

    def __repr__(self) -> str:
        extra = ""
        if self.client_cert_pem is not None:
            try:
                info = cert_info(self.client_cert_pem)
                extra = f", cn={info.cn!r}, not_after={info.not_after.isoformat()}"
            except ValueError:
                extra = ", cn=?"
        if self.token_file is not None:
            extra += f", token_file={self.token_file!r}"
        if self.proxy_url is not None:
            extra += f", proxy_url={_strip_userinfo(self.proxy_url)!r}"
        if self.tls_server_name is not None:
            extra += f", tls_server_name={self.tls_server_name!r}"
        return f"Credentials(server={self.server!r}, auth={self.auth_kind}{extra}, source={self.source!r})"

    __str__ = __repr__


class CertInfo(NamedTuple):
    serial: int
    not_before: dt.datetime
    not_after: dt.datetime
    cn: str | None
    orgs: tuple[str, ...]


def cert_info(pem: bytes | str) -> CertInfo:
    """Serial, validity (aware UTC datetimes), subject CN and O of the first certificate in ``pem``."""
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        cert = x509.load_pem_x509_certificate(data)
    except ValueError as exc:
        raise ValueError("not a PEM certificate") from exc
    return cert_info_of(cert)


def cert_info_of(cert: x509.Certificate) -> CertInfo:
    """``cert_info`` of a certificate already loaded."""
    cns = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = tuple(str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    return CertInfo(
        serial=cert.serial_number,
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        cn=cns[0] if cns else None,
        orgs=orgs,
    )


# ---------------------------------------------------------------------------------------------- parsing


def load_kubeconfig_file(
    path: str | os.PathLike[str], *, context: str | None = None, allow_exec: bool = False
) -> Credentials:
    """Parse the operator's kubeconfig file (blocking: call from a thread on the loop); it may name
    local files, and relative references resolve against its directory. ``allow_exec`` (the operator's
    own kubeconfig in ``vkbridge doctor`` only) runs an ``exec`` credential plugin (``execplugin``)."""
    p = Path(path)
    text = _read_local_file(p, f"kubeconfig {p}")
    return parse_kubeconfig(
        text, base_dir=p.parent, context=context, source=str(p), allow_files=True, allow_exec=allow_exec
    )


def parse_kubeconfig(
    config: str | bytes | Mapping[str, Any],
    *,
    base_dir: str | os.PathLike[str] | None = None,
    context: str | None = None,
    source: str = "kubeconfig",
    allow_files: bool = False,
    allow_exec: bool = False,
) -> Credentials:
    """Credentials of the current (or given) context. Raises ``KubeconfigError`` with one clear reason,
    naming ``source`` so the operator knows which file or Secret to fix.

    Without ``allow_files`` (the default: a kubeconfig from a Secret) any field of FILE_FIELDS is refused
    before anything is read; only inline data (``*-data``, ``token``) is used.
    """
    try:
        return _parse(config, base_dir if allow_files else None, context, source, allow_files, allow_exec)
    except KubeconfigError as err:
        if source == "kubeconfig" or source in str(err):
            raise
        raise KubeconfigError(f"{source}: {err}") from None


def _parse(
    config: str | bytes | Mapping[str, Any],
    base_dir: str | os.PathLike[str] | None,
    context: str | None,
    source: str,
    allow_files: bool,
    allow_exec: bool = False,
) -> Credentials:
    doc = _load_doc(config)
    ctx_name = context or doc.get("current-context") or ""
    contexts = _named(doc, "contexts", "context")
    if not ctx_name:
        if len(contexts) != 1:
            raise KubeconfigError("kubeconfig has no current-context")
        ctx_name = next(iter(contexts))
    if ctx_name not in contexts:
        raise KubeconfigError(f"kubeconfig context {ctx_name!r} not found")
    ctx = contexts[ctx_name]
    cluster_name = ctx.get("cluster")
    user_name = ctx.get("user")
    clusters = _named(doc, "clusters", "cluster")
    if not isinstance(cluster_name, str) or cluster_name not in clusters:
        raise KubeconfigError(f"kubeconfig context {ctx_name!r} references unknown cluster {cluster_name!r}")
    users = _named(doc, "users", "user")
    user: Mapping[str, Any] = {}
    if isinstance(user_name, str) and user_name:
        if user_name not in users:
            raise KubeconfigError(f"kubeconfig context {ctx_name!r} references unknown user {user_name!r}")
        user = users[user_name]
    if not allow_files:
        _refuse_file_fields("cluster", cluster_name, clusters[cluster_name])
        _refuse_file_fields("user", str(user_name), user)
    base = Path(base_dir) if base_dir is not None else None
    return _credentials(clusters[cluster_name], user, base, source, allow_exec and allow_files)


def _refuse_file_fields(section: str, name: str, body: Mapping[str, Any]) -> None:
    for key in FILE_FIELDS[section]:
        if body.get(key) not in (None, ""):
            raise KubeconfigError(
                f"refusing kubeconfig: {section} {name!r} sets {key}, a local file path; a kubeconfig "
                "from a Secret may carry only inline data (certificate-authority-data, "
                "client-certificate-data, client-key-data, token), and vkbridge never opens the file"
            )


def _load_doc(config: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    return config if isinstance(config, Mapping) else load_kubeconfig_doc(config)


def load_kubeconfig_doc(raw: bytes | str) -> dict[str, Any]:
    """A kubeconfig's YAML (or JSON) as a mapping; anything else is a ``KubeconfigError``."""
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise KubeconfigError("kubeconfig is not valid YAML/JSON") from None
    if not isinstance(doc, dict):
        raise KubeconfigError("kubeconfig is not a mapping")
    return doc


def _named(doc: Mapping[str, Any], list_key: str, item_key: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    items = doc.get(list_key) or []
    if not isinstance(items, list):
        raise KubeconfigError(f"kubeconfig {list_key} is not a list")
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise KubeconfigError(f"kubeconfig {list_key} entry without a name")
        body = item.get(item_key) or {}
        if not isinstance(body, Mapping):
            raise KubeconfigError(f"kubeconfig {list_key} entry {item['name']!r} is malformed")
        out[item["name"]] = body
    return out


def _credentials(
    cluster: Mapping[str, Any],
    user: Mapping[str, Any],
    base: Path | None,
    source: str,
    allow_exec: bool = False,
) -> Credentials:
    if cluster.get("insecure-skip-tls-verify"):
        raise KubeconfigError(
            "refusing kubeconfig: insecure-skip-tls-verify is set; "
            "vkbridge always verifies the pool's certificate"
        )
    server = _check_server(cluster.get("server"))
    ca = _data_or_file(cluster, "certificate-authority-data", "certificate-authority", base)
    if ca is None:
        raise KubeconfigError(
            "refusing kubeconfig: no certificate-authority(-data) to verify the server with"
        )
    try:
        x509.load_pem_x509_certificates(ca)
    except ValueError:
        raise KubeconfigError(
            "refusing kubeconfig: certificate-authority is not a valid PEM certificate"
        ) from None

    proxy_url = cluster.get("proxy-url") or None
    if proxy_url is not None:
        scheme = str(proxy_url).split("://", 1)[0].lower()
        if scheme not in _SUPPORTED_PROXY_SCHEMES:
            raise KubeconfigError(f"refusing kubeconfig: proxy-url scheme {scheme!r} is not supported")
    tls_server_name = cluster.get("tls-server-name") or None

    plugin: ExecCredential | None = None
    if user.get("exec") and allow_exec:
        exec_cfg = user["exec"]
        if not isinstance(exec_cfg, Mapping):
            raise KubeconfigError("refusing kubeconfig: exec is not a mapping")
        try:
            plugin = run_exec_plugin(exec_cfg, base)
        except ExecPluginError as err:
            raise KubeconfigError(f"kubeconfig: {err}") from None
    elif user.get("exec"):
        raise KubeconfigError(
            "refusing kubeconfig: exec credential plugins are not supported; "
            "use a client certificate or token"
        )
    if user.get("auth-provider"):
        raise KubeconfigError(
            "refusing kubeconfig: auth-provider plugins are not supported; use a client certificate or token"
        )

    cert = _data_or_file(user, "client-certificate-data", "client-certificate", base)
    key = _data_or_file(user, "client-key-data", "client-key", base)
    if plugin is not None and cert is None and plugin.client_cert_pem is not None:
        cert, key = plugin.client_cert_pem, plugin.client_key_pem
    if (cert is None) != (key is None):
        raise KubeconfigError("refusing kubeconfig: client certificate and client key must be given together")
    if cert is not None and key is not None:
        _check_cert_and_key(cert, key)

    token = user.get("token") or (plugin.token if plugin is not None else None)
    token_file = user.get("tokenFile") or None
    if token_file is not None:
        token_path = Path(str(token_file))
        if base is not None and not token_path.is_absolute():
            token_path = base / token_path
        token_file = str(token_path)
        if token is None:
            token = read_token(token_file)
    if token is not None and not isinstance(token, str):
        raise KubeconfigError("refusing kubeconfig: token is not a string")
    if cert is None and token is None:
        raise KubeconfigError("refusing kubeconfig: no credentials (need a client certificate or a token)")

    return Credentials(
        server=server,
        ca_pem=ca,
        client_cert_pem=cert,
        client_key_pem=key,
        token=token,
        token_file=token_file,
        proxy_url=str(proxy_url) if proxy_url else None,
        tls_server_name=str(tls_server_name) if tls_server_name else None,
        source=source,
    )


def _check_server(server: object) -> str:
    """The server URL without a trailing slash: https, a host, and nothing a log or Host header could leak.

    Userinfo (``https://user:secret@host``) is refused, never echoed; a query or fragment is refused as
    client-go cannot use one either (request paths are appended to the URL).
    """
    if not isinstance(server, str) or not server:
        raise KubeconfigError("refusing kubeconfig: cluster has no server URL")
    if any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in server):
        raise KubeconfigError("refusing kubeconfig: server URL contains whitespace or control characters")
    if "@" in server:  # anywhere: a password may hold '/', '?' or '#', which would hide it from urlsplit
        host = server.rpartition("@")[2].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
        raise KubeconfigError(
            f"refusing kubeconfig: server URL 'https://***@{host}' carries userinfo (user:password@); "
            "put credentials in the kubeconfig's user, never in the URL"
        )
    shown = server.partition("?")[0].partition("#")[0]  # a query may hold a secret too
    parts = urlsplit(server)
    if parts.scheme != "https":
        raise KubeconfigError(f"refusing kubeconfig: server must be https, got {shown!r}")
    if "?" in server or "#" in server:
        raise KubeconfigError(
            f"refusing kubeconfig: server URL {shown!r} has a query or fragment; give scheme, host, port "
            "and an optional path only"
        )
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise KubeconfigError(f"refusing kubeconfig: server URL {shown!r} has an invalid port") from None
    if not parts.hostname:
        raise KubeconfigError(f"refusing kubeconfig: server URL {shown!r} has no host")
    return server.rstrip("/")


def _data_or_file(
    section: Mapping[str, Any], data_key: str, file_key: str, base: Path | None
) -> bytes | None:
    data = section.get(data_key)
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise KubeconfigError(f"refusing kubeconfig: {data_key} is not valid base64") from None
    path = section.get(file_key)
    if path:
        p = Path(str(path))
        if base is not None and not p.is_absolute():
            p = base / p
        return _read_local_file(p, f"{file_key} {p}", "refusing kubeconfig: ")
    return None


def _read_local_file(path: Path, what: str, prefix: str = "") -> bytes:
    """A regular file of at most MAX_FILE_BYTES; opened non-blocking so a FIFO is refused, not waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise KubeconfigError(f"{prefix}cannot read {what}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise KubeconfigError(f"{prefix}{what} is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 65536):
            size += len(chunk)
            if size > MAX_FILE_BYTES:
                raise KubeconfigError(f"{prefix}{what} is larger than {MAX_FILE_BYTES} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise KubeconfigError(f"{prefix}cannot read {what}: {exc.strerror}") from None
    finally:
        os.close(fd)


def _check_cert_and_key(cert_pem: bytes, key_pem: bytes) -> None:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        raise KubeconfigError(
            "refusing kubeconfig: client certificate is not a valid PEM certificate"
        ) from None
    key = _load_key(key_pem)
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if cert.public_key().public_bytes(der, pub) != key.public_key().public_bytes(der, pub):
        raise KubeconfigError("refusing kubeconfig: client key does not match the client certificate")


def _load_key(key_pem: bytes) -> PrivateKeyTypes:
    try:
        return serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        # Never chain the original exception: some messages echo input fragments.
        raise KubeconfigError(
            "refusing kubeconfig: client key is not a valid unencrypted PEM private key"
        ) from None
    except Exception:
        raise KubeconfigError("refusing kubeconfig: client key is not a supported private key") from None


def _strip_userinfo(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        return f"{scheme}://***@{authority.rpartition('@')[2]}{tail}"
    return url


# ---------------------------------------------------------------------------------------------- in-cluster


def read_token(path: str | os.PathLike[str]) -> str:
    """Read a bearer token file (blocking: call from a thread on the loop); regular files only."""
    try:
        token = _read_local_file(Path(path), f"token file {path}").decode().strip()
    except UnicodeDecodeError:
        raise KubeconfigError(f"token file {path} is not text") from None
    if not token:
        raise KubeconfigError(f"token file {path} is empty")
    return token


def in_cluster_credentials(
    sa_dir: str | os.PathLike[str] = SA_DIR, environ: Mapping[str, str] | None = None
) -> Credentials:
    """The pod's service-account identity; the token file is kept so rotated tokens are picked up."""
    env = os.environ if environ is None else environ
    host = env.get("KUBERNETES_SERVICE_HOST")
    port = env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass
    d = Path(sa_dir)
    token_file = d / "token"
    token = read_token(token_file)
    ca = _read_local_file(d / "ca.crt", str(d / "ca.crt"))
    try:
        x509.load_pem_x509_certificates(ca)
    except ValueError:
        raise KubeconfigError(f"{d / 'ca.crt'} is not a valid PEM certificate") from None
    return Credentials(
        server=f"https://{host}:{port}",
        ca_pem=ca,
        token=token,
        token_file=str(token_file),
        source="in-cluster",
    )


# ---------------------------------------------------------------------------------------------- TLS


def ssl_context(creds: Credentials) -> ssl.SSLContext:
    """A verifying client context built in memory: the key goes through a memfd, never a file on disk.

    Hostname checking stays on. ``tls_server_name`` does not relax it: the client passes it as the
    per-connection ``server_hostname`` (SNI and the name checked), like client-go's ServerName. A
    server reached by IP literal must carry that IP in its certificate's SANs.
    """
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=creds.ca_pem.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError):
        raise KubeconfigError("certificate-authority is not a usable PEM bundle") from None
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.check_hostname = True
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if creds.client_cert_pem is not None and creds.client_key_pem is not None:
        _load_chain_from_memory(ctx, creds.client_cert_pem, creds.client_key_pem)
    return ctx


def _load_chain_from_memory(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    fd = os.memfd_create("vkbridge-cred", os.MFD_CLOEXEC)
    try:
        payload = cert_pem.rstrip(b"\n") + b"\n" + key_pem
        view = memoryview(payload)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        ctx.load_cert_chain(f"/proc/self/fd/{fd}")
    except ssl.SSLError:
        raise KubeconfigError("client certificate/key cannot be loaded (malformed or mismatched)") from None
    finally:
        os.close(fd)
