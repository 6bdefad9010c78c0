"""CLI: python -m e2e.fakekubelet --kubeconfig K --node N [--node N2] --serving-cert C --serving-key K
--workdir D [--no-exec]. Writes <workdir>/ready.json once every node is registered and its pods listed."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from .app import Options, run
from .writers import EVENT_LEVELS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m e2e.fakekubelet", description=__doc__)
    p.add_argument("--kubeconfig", type=Path, required=True)
    p.add_argument("--node", dest="nodes", action="append", required=True, help="repeat for more nodes")
    p.add_argument(
        "--serving-cert", type=Path, action="append", required=True, help="PEM; once, or once per --node"
    )
    p.add_argument(
        "--serving-key", type=Path, action="append", required=True, help="PEM; like --serving-cert"
    )
    p.add_argument("--client-ca", type=Path, help="PEM CA for optional client certs (default: kubeconfig CA)")
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--no-exec", action="store_true", help="no processes: containers run as timers only")
    p.add_argument("--lease-interval", type=float, default=10.0)
    p.add_argument("--status-interval", type=float, default=30.0)
    p.add_argument("--status-concurrency", type=int, default=20)
    p.add_argument(
        "--events",
        choices=EVENT_LEVELS,
        default="all",
        help="which kubelet Events to post (benchmarks: warnings)",
    )
    p.add_argument("--log-level", default="info")
    args = p.parse_args(argv)
    if len(args.serving_cert) != len(args.serving_key) or len(args.serving_cert) not in (1, len(args.nodes)):
        p.error("give --serving-cert/--serving-key once, or once per --node")
    if len(set(args.nodes)) != len(args.nodes):
        p.error("duplicate --node")
    return args


def options(args: argparse.Namespace) -> Options:
    certs = [
        (c.read_bytes(), k.read_bytes()) for c, k in zip(args.serving_cert, args.serving_key, strict=True)
    ]
    per_node = dict(zip(args.nodes, certs, strict=True)) if len(certs) == len(args.nodes) else {}
    return Options(
        kubeconfig=args.kubeconfig,
        nodes=list(args.nodes),
        serving_cert=certs[0][0],
        serving_key=certs[0][1],
        workdir=args.workdir,
        no_exec=args.no_exec,
        client_ca=args.client_ca.read_bytes() if args.client_ca else None,
        lease_interval=args.lease_interval,
        status_interval=args.status_interval,
        status_concurrency=args.status_concurrency,
        events=args.events,
        node_certs=per_node,
    )


async def amain(opts: Options) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return await run(opts, stop)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    return asyncio.run(amain(options(args)))


if __name__ == "__main__":
    sys.exit(main())
