"""TokenSource: a token file is re-read once the token is older than the refresh period, not before."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support.clock import FakeClock
from vkbridge.kube.kubeconfig import Credentials
from vkbridge.kube.tokensource import TOKEN_REFRESH_SECONDS, TokenSource
from vkbridge.logs import JsonFormatter, TextFormatter


def _creds(token_file: Path) -> Credentials:
    return Credentials(server="https://127.0.0.1:6443", ca_pem=b"", token="first", token_file=str(token_file))


async def test_token_file_is_reread_only_after_the_refresh_period(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("second\n")
    clock = FakeClock()
    tokens = TokenSource(_creds(token_file), "t", clock)
    assert await tokens.auth_headers() == {"Authorization": "Bearer first"}
    clock.advance(TOKEN_REFRESH_SECONDS)
    assert await tokens.auth_headers() == {"Authorization": "Bearer first"}
    clock.advance(0.5)
    assert await tokens.auth_headers() == {"Authorization": "Bearer second"}


async def test_an_unreadable_token_file_keeps_the_previous_token(tmp_path: Path) -> None:
    clock = FakeClock()
    tokens = TokenSource(_creds(tmp_path / "gone"), "t", clock)
    clock.advance(TOKEN_REFRESH_SECONDS + 1)
    assert await tokens.auth_headers() == {"Authorization": "Bearer first"}


async def test_no_token_no_header() -> None:
    creds = Credentials(server="https://127.0.0.1:6443", ca_pem=b"")
    assert await TokenSource(creds, "t").auth_headers() == {}


async def test_a_refused_token_file_is_logged_without_any_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token_file = tmp_path / "token"
    token_file.write_bytes(b"new-secret-token\xff")  # not text: refused, the previous token kept
    clock = FakeClock()
    tokens = TokenSource(_creds(token_file), "t", clock)
    clock.advance(TOKEN_REFRESH_SECONDS + 1)
    assert await tokens.auth_headers() == {"Authorization": "Bearer first"}
    lines = "\n".join(f.format(r) for r in caplog.records for f in (TextFormatter(), JsonFormatter()))
    assert "keeping the previous token" in lines and str(token_file) in lines
    assert "first" not in lines and "new-secret-token" not in lines
