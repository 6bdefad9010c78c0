"""Keeps the pool client certificate fresh, so the virtual node never dies of an expired identity.

Two sources, whichever brings a newer valid certificate first wins:

- the ResourceSlice status (Liqo's provider re-signs the same CSR at 2/3 of the lifetime and the
  replicator copies ``status.authParams.signedCRT`` back): we verify it, swap it into the pool client at
  once and write it into the kubeconfig Secret with the key already there;
- a ``Renew`` on the pool, our fallback when nothing newer arrived in time: a CSR for exactly the
  current subject, signed by the same key, answered in ``status.authParams.signedCRT``.

The kubeconfig Secret itself is followed by ``RemoteCredentialWatcher`` (a new bundle swaps there);
here it is only written, with resourceVersion, re-read on conflict and never overwritten when it holds
another key (a rotated bundle) or a newer certificate. An expired certificate is not ours to fix: we
say once what the operator must do. The objects themselves (the Renew's body, whose Renew it is, the
Secret's state) are pure functions in `renewobjects`; here is the loop that reads, writes and waits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import math
import time
from collections.abc import Callable
from typing import Any, Final

from reflectors.forge.constants import FIELD_MANAGER
from reflectors.forge.timefmt import rfc3339
from vkbridge.credentials.certs import (
    DEFAULT_RENEW_FRACTION,
    CertificateRejected,
    SigningKey,
    decode_pem_field,
    load_private_key,
    renew_point,
    seconds_to_expiry,
    verify_certificate,
)
from vkbridge.credentials.renewobjects import (
    RenewScope,
    digest,
    renew_matches,
    secret_state,
    secret_with_certificate,
    serial,
    signed_crt,
)
from vkbridge.kube.backoff import Backoff
from vkbridge.kube.cache import Cache, object_key
from vkbridge.kube.client import RENEWS, SECRETS, ApiError, KubeClient
from vkbridge.kube.kubeconfig import CertInfo, Credentials, KubeconfigError, cert_info
from vkbridge.kube.reachability import Reachability
from vkbridge.logs import get_logger
from vkbridge.metrics import Metrics

__all__ = ["CertificateRenewer", "RenewFailed"]

log = get_logger("vkbridge.credentials")

MAX_SLEEP_S: Final = 600.0  # re-read the wall clock at least this often (suspend, clock steps)
ERROR_RETRY_S: Final = 30.0
PERSIST_BACKOFF: Final = (2.0, 60.0)
POLL_BACKOFF: Final = (0.5, 5.0)
MAX_CONFLICTS: Final = 8


class RenewFailed(Exception):
    """A Renew round that gave no usable certificate; the message is one clear reason."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class CertificateRenewer:
    """Follows the ResourceSlice, asks the pool with a Renew when needed, swaps and persists the result."""

    def __init__(
        self,
        home: KubeClient,
        pool: KubeClient,
        *,
        tenant_namespace: str,
        secret_name: str,
        resource_slice_name: str,
        remote_tenant_namespace: str,
        consumer_cluster_id: str,
        renew_fraction: float = DEFAULT_RENEW_FRACTION,
        metrics: Metrics,
        reach: Reachability,
        resource_slice_cache: Cache,
        secret_cache: Cache,
        provider_grace: float = 0.1,
        answer_timeout: float = 120.0,
        retry_base: float = 30.0,
        retry_cap: float = 600.0,
        clock: Callable[[], dt.datetime] = _utcnow,
    ) -> None:
        """``provider_grace`` (a fraction of the lifetime) lets the provider's own re-signing win first:
        Liqo requeues at 1.1 x the time to its 2/3 point, so it may re-sign up to ~7 % of the lifetime
        after it. 0 asks the pool exactly at ``renew_fraction``.
        """
        if not 0.0 < renew_fraction < 1.0:
            raise ValueError(f"renew_fraction must be in (0, 1), got {renew_fraction!r}")
        if provider_grace < 0.0 or renew_fraction + provider_grace >= 1.0:
            raise ValueError("renew_fraction + provider_grace must stay below 1")
        self._home, self._pool = home, pool
        self._tenant_ns, self._secret_name = tenant_namespace, secret_name
        self._rs_name, self._remote_ns = resource_slice_name, remote_tenant_namespace
        self._scope = RenewScope(remote_tenant_namespace, resource_slice_name, consumer_cluster_id)
        self._fraction, self._grace = renew_fraction, provider_grace
        self._metrics, self._reach = metrics, reach
        self._rs_cache, self._secret_cache = resource_slice_cache, secret_cache
        self._answer_timeout = answer_timeout
        self._clock = clock
        self._rs_key = f"{tenant_namespace}/{resource_slice_name}"
        self._secret_key = f"{tenant_namespace}/{secret_name}"
        self._wake = asyncio.Event()
        self._retry = Backoff(retry_base, retry_cap)
        self._retry_at: float | None = None
        self._persist_retry = Backoff(*PERSIST_BACKOFF)
        self._persist_pending = False
        self._replaced_rv: str | None = None  # the Secret version our last write replaced (cache lag)
        self._may_delete_renews = True
        self._said: set[str] = set()
        self._unloadable: set[str] = set()
        self._info_memo: tuple[bytes, CertInfo] | None = None
        self._key_memo: tuple[bytes, SigningKey] | None = None
        self.renewals = 0
        self.failures = 0
        resource_slice_cache.subscribe(self._on_slice)
        secret_cache.subscribe(self._on_secret)
        metrics.cert_expiry_seconds.set_function(self.seconds_to_expiry)  # read at scrape time

    # -- events and clocks

    def _on_slice(self, _type: str, old: Any, new: Any) -> None:
        if object_key(new or old or {}) == self._rs_key:
            self._wake.set()

    def _on_secret(self, _type: str, old: Any, new: Any) -> None:
        if object_key(new or old or {}) == self._secret_key:
            self._wake.set()

    async def _sleep(self, delay: float) -> None:
        """Sleep up to ``delay`` seconds; a ResourceSlice or Secret change wakes us early."""
        if delay <= 0:
            return
        try:
            async with asyncio.timeout(min(delay, MAX_SLEEP_S)):
                await self._wake.wait()
        except TimeoutError:
            pass

    def _once(self, key: str) -> bool:
        """True the first time ``key`` is seen: one log line per fact, not per loop."""
        if key in self._said:
            return False
        self._said.add(key)
        return True

    # -- facts about the credential in use

    def _info(self, pem: bytes) -> CertInfo:
        if self._info_memo is None or self._info_memo[0] != pem:
            self._info_memo = (pem, cert_info(pem))
        return self._info_memo[1]

    def _key(self, pem: bytes) -> SigningKey:
        if self._key_memo is None or self._key_memo[0] != pem:
            self._key_memo = (pem, load_private_key(pem))
        return self._key_memo[1]

    def seconds_to_expiry(self) -> float:
        """Of the certificate the pool client presents now (NaN when it uses no certificate)."""
        pem = self._pool.credentials.client_cert_pem
        if pem is None:
            return math.nan
        try:
            return seconds_to_expiry(self._info(pem).not_after, self._clock())
        except ValueError:
            return math.nan

    def ask_at(self, info: CertInfo) -> dt.datetime:
        """When we ask the pool ourselves if no newer certificate arrived."""
        return renew_point(info.not_before, info.not_after, self._fraction + self._grace)

    # -- the loop

    async def run(self) -> None:
        """Run until cancelled; never raises otherwise (a bug is logged and retried)."""
        self._describe_current()
        while True:
            self._wake.clear()
            try:
                delay = await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("certificate renewal step failed; retrying", retry_in=f"{ERROR_RETRY_S:.0f}s")
                delay = ERROR_RETRY_S
            await self._sleep(delay)

    def _describe_current(self) -> None:
        creds = self._pool.credentials
        if creds.client_cert_pem is None:
            return
        try:
            info = self._info(creds.client_cert_pem)
        except ValueError:
            return
        log.info(
            "pool client certificate",
            subject=info.cn,
            serial=serial(info),
            not_after=rfc3339(info.not_after),
            renew_from=rfc3339(self.ask_at(info)),
        )

    async def reconcile(self) -> float:
        """One look at every source; returns the seconds until the next look is due."""
        now = self._clock()
        creds = self._pool.credentials
        if creds.client_cert_pem is None or creds.client_key_pem is None:
            if self._once("no-certificate"):
                log.info(
                    "the pool credential is not a client certificate; nothing to renew", auth=creds.auth_kind
                )
            return MAX_SLEEP_S
        try:
            key = self._key(creds.client_key_pem)
            current = self._info(creds.client_cert_pem)
        except (CertificateRejected, ValueError) as err:
            if self._once(f"unusable:{err}"):
                log.error("the pool client credential cannot be renewed", error=str(err))
            return MAX_SLEEP_S

        found = self._slice_candidate(creds, key, current, now)
        if found is not None and await self._adopt(found[0], found[1], key, "ResourceSlice"):
            creds, current = self._pool.credentials, found[1]
        delays = [MAX_SLEEP_S]
        if not await self._heal_secret(creds, key, current):
            delays.append(self._persist_retry.next())

        if current.not_after <= now:
            if self._once(f"expired:{current.serial}"):
                log.error(
                    f"the pool client certificate expired at {rfc3339(current.not_after)}: "
                    "apply a new bundle (user guide section 5, Rotate the credentials)",
                    serial=serial(current),
                )
            return min(delays)
        due = self.ask_at(current)
        if now < due:
            delays += [(due - now).total_seconds(), (current.not_after - now).total_seconds()]
            return max(0.0, min(delays))
        if self._retry_at is not None and time.monotonic() < self._retry_at:
            delays.append(self._retry_at - time.monotonic())
            return max(0.0, min(delays))
        await self._renew(creds, key, current)
        if self._retry_at is None:
            return 0.0  # renewed, or superseded by a newer certificate: look again at once
        delays.append(self._retry_at - time.monotonic())
        return max(0.0, min(delays))

    # -- the ResourceSlice path

    def _slice_candidate(
        self, creds: Credentials, key: SigningKey, current: CertInfo, now: dt.datetime
    ) -> tuple[bytes, CertInfo] | None:
        """A verified certificate from the ResourceSlice status that is newer than the one in use."""
        rs = self._rs_cache.get(self._rs_key) or {}
        raw = signed_crt(rs)
        if not raw:
            return None
        where = f"ResourceSlice {self._rs_key} status.authParams.signedCRT"
        try:
            pem = decode_pem_field(raw, where)
            if pem.strip() == (creds.client_cert_pem or b"").strip() or digest(pem) in self._unloadable:
                return None
            try:
                if cert_info(pem).not_after <= current.not_after:
                    return None  # older or equal: e.g. the one a Renew already replaced
            except ValueError:
                raise CertificateRejected(f"{where} is not a PEM certificate") from None
            info = verify_certificate(
                pem, key=key, cn=current.cn or "", orgs=current.orgs, now=now, ca_pem=creds.ca_pem
            )
        except CertificateRejected as err:
            if self._once(f"slice:{digest(str(raw).encode())}"):
                log.warning("ignoring the certificate in the ResourceSlice status", reason=str(err))
            return None
        return pem, info

    async def _adopt(self, pem: bytes, info: CertInfo, key: SigningKey, source: str) -> bool:
        """Swap the new certificate into the pool client at once, then persist it in the Secret."""
        new = dataclasses.replace(self._pool.credentials, client_cert_pem=pem)
        try:
            await self._pool.swap_credentials(new)
        except KubeconfigError as err:
            self._unloadable.add(digest(pem))  # never retry it in a loop
            log.error("renewed certificate could not be loaded; keeping the current one", error=str(err))
            return False
        self.renewals += 1
        self._retry.reset()
        self._retry_at = None
        log.info(
            "pool client certificate renewed",
            source=source,
            serial=serial(info),
            not_after=rfc3339(info.not_after),
        )
        if not await self._persist(pem, info, key):
            self._persist_pending = True
        return True

    # -- the Secret

    async def _read_secret(self, fresh: bool) -> dict[str, Any] | None:
        if not fresh:
            cached = self._secret_cache.get(self._secret_key)
            if cached is not None:
                return cached
        try:
            return await self._home.get(SECRETS, self._secret_name, self._tenant_ns)
        except ApiError as err:
            if err.not_found:
                return None
            raise

    async def _persist(self, pem: bytes, info: CertInfo, key: SigningKey) -> bool:
        """Write ``pem`` into the Secret; True when nothing is left to do (written, or not ours to write)."""
        where = f"{self._tenant_ns}/{self._secret_name}"
        try:
            for attempt in range(MAX_CONFLICTS):
                secret = await self._read_secret(fresh=attempt > 0)
                if secret is None:
                    if self._once(f"no-secret:{info.serial}"):
                        log.warning(
                            "kubeconfig Secret not found; the renewed certificate is only in memory",
                            secret=where,
                        )
                    return True
                state = secret_state(secret, key, info)
                if state == "current":
                    return True
                if state in ("other-key", "unreadable"):
                    if self._once(f"secret-{state}:{secret['metadata'].get('resourceVersion')}"):
                        log.info(
                            "kubeconfig Secret holds another credential (a new bundle?); not overwriting it",
                            secret=where,
                            state=state,
                        )
                    return True
                body = secret_with_certificate(secret, pem)
                try:
                    await self._home.replace(SECRETS, body, self._tenant_ns, field_manager=FIELD_MANAGER)
                except ApiError as err:
                    if err.conflict:
                        continue  # someone else wrote it: re-read and decide again
                    raise
                self._replaced_rv = str(secret["metadata"].get("resourceVersion"))
                self._persist_retry.reset()
                self._persist_pending = False
                log.info(
                    "renewed certificate written to the kubeconfig Secret", secret=where, serial=serial(info)
                )
                return True
            log.warning("kubeconfig Secret keeps changing under us; will write it again", secret=where)
        except (ApiError, KubeconfigError) as err:
            log.warning(
                "could not write the renewed certificate to the kubeconfig Secret; will retry",
                secret=where,
                error=str(err)[:300],
            )
        return False

    async def _heal_secret(self, creds: Credentials, key: SigningKey, current: CertInfo) -> bool:
        """Make sure the Secret is not older than what we run with (a failed or overwritten write)."""
        secret = self._secret_cache.get(self._secret_key)
        if not self._persist_pending:
            if secret is None:
                return True
            if str(secret["metadata"].get("resourceVersion")) == self._replaced_rv:
                return True  # the cache has not seen our write yet
            if secret_state(secret, key, current) != "older":
                return True
        assert creds.client_cert_pem is not None
        ok = await self._persist(creds.client_cert_pem, current, key)
        self._persist_pending = not ok
        return ok

    # -- the Renew path

    def renew_name(self, current: CertInfo) -> str:
        """One Renew per certificate being replaced: retries and restarts reuse it, nothing piles up."""
        return self._scope.name(current)

    async def _renew(self, creds: Credentials, key: SigningKey, current: CertInfo) -> None:
        name = self.renew_name(current)
        where = f"{self._remote_ns}/{name}"
        if self._once(f"renew:{name}"):
            log.info(
                "asking the pool to renew the client certificate",
                renew=where,
                serial=serial(current),
                not_after=rfc3339(current.not_after),
            )
        start_pem = creds.client_cert_pem
        assert start_pem is not None
        try:
            renew = await self._ensure_renew(name, key, current)
            pem = await self._await_signed(name, renew, start_pem, key, current)
            if pem is None:
                log.info(
                    "a newer certificate arrived while waiting for the pool; Renew not needed", renew=where
                )
                return
            info = verify_certificate(
                pem, key=key, cn=current.cn or "", orgs=current.orgs, now=self._clock(), ca_pem=creds.ca_pem
            )
            if info.not_after <= current.not_after:
                raise RenewFailed("the pool answered with a certificate no newer than the current one")
            if not await self._adopt(pem, info, key, "Renew"):
                raise RenewFailed("the renewed certificate could not be loaded into the pool client")
            await self._cleanup_renews()
        except (ApiError, RenewFailed, CertificateRejected) as err:
            self._failed(where, err)

    def _failed(self, where: str, err: Exception) -> None:
        self.failures += 1
        self._metrics.cert_renewal_failures.inc()
        delay = self._retry.next()
        self._retry_at = time.monotonic() + delay
        reason = str(err)[:300]
        if isinstance(err, ApiError) and err.unauthorized:
            reason += " (the pool refused our identity or its RBAC lacks renews)"
        log.warning(
            "pool client certificate renewal failed; will retry",
            renew=where,
            error=reason,
            attempt=self._retry.attempts,
            retry_in=f"{delay:.0f}s",
            pool=self._reach.state.value,
        )

    async def _ensure_renew(self, name: str, key: SigningKey, current: CertInfo) -> dict[str, Any]:
        """Create our Renew, or reuse the one a previous attempt (or process) left for this certificate."""
        body = self._scope.body(name, key, current)
        try:
            return await self._pool.create(RENEWS, body, self._remote_ns, field_manager=FIELD_MANAGER)
        except ApiError as err:
            if not err.already_exists:
                raise
        existing = await self._pool.get(RENEWS, name, self._remote_ns)
        if not self._scope.is_ours(existing):
            raise RenewFailed(
                f"Renew {self._remote_ns}/{name} exists and was not created by vkbridge for ResourceSlice "
                f"{self._rs_name}; it is left alone (delete it if it is stale)"
            )
        if renew_matches(existing, key, current):
            return existing
        if not await self._delete_renew(name, existing["metadata"].get("uid")):
            raise RenewFailed(f"Renew {self._remote_ns}/{name} exists for another key and may not be deleted")
        return await self._pool.create(RENEWS, body, self._remote_ns, field_manager=FIELD_MANAGER)

    async def _await_signed(
        self, name: str, renew: dict[str, Any], start_pem: bytes, key: SigningKey, current: CertInfo
    ) -> bytes | None:
        """The signed certificate, or None when a newer one arrived meanwhile from elsewhere."""
        deadline = time.monotonic() + self._answer_timeout
        poll = Backoff(*POLL_BACKOFF)
        while True:
            raw = signed_crt(renew)
            if raw:
                pem = decode_pem_field(raw, f"Renew {name} status.authParams.signedCRT")
                if pem.strip() != start_pem.strip():
                    return pem
            if self._pool.credentials.client_cert_pem != start_pem:
                return None
            if self._slice_candidate(self._pool.credentials, key, current, self._clock()) is not None:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise RenewFailed(
                    f"the pool did not answer Renew {self._remote_ns}/{name} "
                    f"within {self._answer_timeout:.0f} s"
                )
            self._wake.clear()
            await self._sleep(min(poll.next(), left))
            try:
                renew = await self._pool.get(RENEWS, name, self._remote_ns)
            except ApiError as err:
                if err.not_found:
                    raise RenewFailed(
                        f"Renew {self._remote_ns}/{name} was deleted before it was answered"
                    ) from None
                if time.monotonic() >= deadline:
                    raise

    async def _delete_renew(self, name: str, uid: str | None) -> bool:
        """Delete one of our Renews, only the very object we looked at (UID precondition)."""
        if not self._may_delete_renews or not uid:
            return False
        try:
            await self._pool.delete(RENEWS, name, self._remote_ns, preconditions_uid=uid)
        except ApiError as err:
            if err.not_found:
                return True
            if err.unauthorized:
                self._may_delete_renews = False
                log.info(
                    "the pool does not let the tenant delete Renew objects; they stay (one per renewal)",
                    namespace=self._remote_ns,
                )
                return False
            raise
        return True

    async def _cleanup_renews(self) -> None:
        """Delete our answered Renews (all of them are for certificates no longer in use)."""
        if not self._may_delete_renews:
            return
        try:
            found = await self._pool.list(RENEWS, self._remote_ns, label_selector=self._scope.selector)
            for item in found.get("items") or []:
                if not self._scope.is_ours(item):
                    continue
                if not await self._delete_renew(item["metadata"]["name"], item["metadata"].get("uid")):
                    return
        except ApiError as err:
            log.info("could not clean up answered Renew objects", error=str(err)[:200])
