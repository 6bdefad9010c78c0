"""python -m e2e.emulator: the Liqo parts around vkbridge, on a real consumer and a real pool API server."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from .app import ALL, run
from .certs import Signer, parse_duration
from .context import Config, Env
from .kube import Kube


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m e2e.emulator", description=__doc__)
    p.add_argument("--consumer-kubeconfig", required=True, type=Path)
    p.add_argument("--pool-kubeconfig", required=True, type=Path)
    p.add_argument("--consumer-id", required=True, help="consumer cluster id, e.g. c-1a2b3c4d")
    p.add_argument("--slug", required=True, help="pool slug = provider cluster id, e.g. c0123456789ab")
    p.add_argument("--pool-ca-cert", required=True, type=Path, help="the pool API server's client CA")
    p.add_argument("--pool-ca-key", required=True, type=Path)
    p.add_argument("--consumer-ca-cert", type=Path, help="the consumer plane's CA (pod webhook serving cert)")
    p.add_argument("--consumer-ca-key", type=Path)
    p.add_argument("--no-propagate-kubeconfig", action="store_true", help="do not update the consumer Secret")
    p.add_argument("--cert-lifetime", default="365d", help="lifetime of signed certificates (365d, 3m, 90s)")
    p.add_argument("--webhook-port", type=int, default=0, help="quota webhook port on 127.0.0.1 (0: any)")
    p.add_argument("--api-server-url", default="", help="authParams.apiServer (default: the pool's URL)")
    p.add_argument("--controllers", default=",".join(ALL), help=f"subset of {','.join(ALL)}")
    p.add_argument("--ready-file", type=Path, help="written (JSON) once the emulator is ready")
    p.add_argument("--parent-pid", type=int, default=0, help="exit when this process is gone (test runs)")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if (args.consumer_ca_cert is None) != (args.consumer_ca_key is None):
        p.error("--consumer-ca-cert and --consumer-ca-key go together")
    if "podwebhook" in {c.strip() for c in args.controllers.split(",")} and args.consumer_ca_cert is None:
        p.error("the podwebhook controller needs --consumer-ca-cert and --consumer-ca-key")
    return args


def _write_ready(path: Path, info: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**info, "pid": os.getpid()}))
    tmp.replace(path)


async def amain(args: argparse.Namespace) -> None:
    cfg = Config(
        consumer_id=args.consumer_id,
        slug=args.slug,
        cert_lifetime=parse_duration(args.cert_lifetime),
        propagate_kubeconfig=not args.no_propagate_kubeconfig,
        api_server_url=args.api_server_url,
        webhook_port=args.webhook_port,
    )
    env = Env(
        cfg=cfg,
        consumer=Kube.from_kubeconfig(args.consumer_kubeconfig, name="consumer"),
        pool=Kube.from_kubeconfig(args.pool_kubeconfig, name="pool"),
        signer=Signer.from_pem(args.pool_ca_cert.read_bytes(), args.pool_ca_key.read_bytes()),
        consumer_signer=(
            Signer.from_pem(args.consumer_ca_cert.read_bytes(), args.consumer_ca_key.read_bytes())
            if args.consumer_ca_cert
            else None
        ),
    )
    main: Any = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main.cancel)
    enabled = tuple(c.strip() for c in args.controllers.split(",") if c.strip())
    on_ready = (lambda info: _write_ready(args.ready_file, info)) if args.ready_file else None
    watchdog = asyncio.create_task(_exit_with_parent(args.parent_pid, main)) if args.parent_pid else None
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await run(env, enabled=enabled, on_ready=on_ready)
    finally:
        if watchdog is not None:
            watchdog.cancel()


async def _exit_with_parent(parent_pid: int, main: asyncio.Task[object]) -> None:
    """A killed test run must not leave an emulator behind: stop once we are re-parented."""
    while True:
        await asyncio.sleep(1.0)
        if os.getppid() != parent_pid:
            break
    logging.getLogger(__name__).warning("parent %d is gone; stopping", parent_pid)
    main.cancel()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    asyncio.run(amain(args))
    logging.getLogger(__name__).info("emulator stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
