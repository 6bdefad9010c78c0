"""The bearer token of one identity, re-read from its token file at most once a minute.

A projected service-account token rotates in place under a running process; re-reading it on every
request would be a file read per API call (client-go's cached file token source does the same).
``KubeClient`` and the pool stream dialer each hold one per identity, so a swapped identity starts afresh.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

from vkbridge.kube.kubeconfig import Credentials, KubeconfigError, read_token
from vkbridge.logs import get_logger

__all__ = ["TOKEN_REFRESH_SECONDS", "TokenSource"]

log = get_logger(__name__)

TOKEN_REFRESH_SECONDS: Final = 60.0


class TokenSource:
    """``creds.token``, replaced by the content of ``creds.token_file`` once it is older than
    ``TOKEN_REFRESH_SECONDS``; an unreadable file keeps the previous token (and says so, naming ``owner``)."""

    def __init__(self, creds: Credentials, owner: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._token = creds.token
        self._file = creds.token_file
        self._owner = owner
        self._clock = clock
        self._read_at = clock()

    async def auth_headers(self) -> dict[str, str]:
        """The ``Authorization`` header for the current token (none without a token)."""
        if self._file is not None and self._clock() - self._read_at > TOKEN_REFRESH_SECONDS:
            self._read_at = self._clock()
            try:
                self._token = await asyncio.to_thread(read_token, self._file)
            except KubeconfigError as exc:
                log.warning("keeping the previous token", client=self._owner, error=exc)
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}
