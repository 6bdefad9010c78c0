"""Fault-injecting TCP proxy that plays the Cloudflare tunnel between vkbridge and the pool API server.

It works at the TCP level, so TLS passes through untouched and the client still verifies the real
server certificate. Tests steer it with thread-safe control methods (latency, resets, black-holing,
refusal, periodic cuts) to reproduce what a flaky or hibernating pool looks like from the consumer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import logging
import random
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["TunnelProxy"]

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024
# Chunks queued per direction before the reader stops reading: keeps backpressure under latency.
_QUEUE_CHUNKS = 64
_CONTROL_TIMEOUT_S = 10.0


class _Mode(enum.Enum):
    FORWARD = "forward"
    BLACKHOLE = "blackhole"
    REFUSE = "refuse"


@dataclass(eq=False)
class _Conn:
    """One proxied client connection and everything the proxy must tear down with it."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    task: asyncio.Task[None] | None = None
    cut_timer: asyncio.TimerHandle | None = None
    blackholed: bool = False
    closed: bool = False


def _rst(writer: asyncio.StreamWriter | None) -> None:
    """Close with SO_LINGER 0 so the peer gets a TCP RST rather than a clean FIN."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class TunnelProxy:
    """TCP proxy to ``target_host:target_port`` with fault injection.

    Run it with :meth:`start` (own event loop in a daemon thread) or :meth:`start_async` (the
    caller's loop). Control methods may be called from any thread; when called off the proxy's
    loop they return once the change has been applied to the open connections.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self.listen_port = listen_port

        self._lock = threading.Lock()
        self._mode = _Mode.FORWARD
        self._latency = 0.0
        self._cut_range: tuple[float, float] | None = None
        self._rng = random.Random()

        self._connections_total = 0
        self._bytes_up = 0
        self._bytes_down = 0
        self._resets_total = 0

        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None
        self._port: int | None = None

        self._thread: threading.Thread | None = None
        self._own_loop: asyncio.AbstractEventLoop | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Run the proxy on its own event loop in a daemon thread; return once it is listening."""
        if self._thread is not None or self._server is not None:
            raise RuntimeError("TunnelProxy already started")
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._own_loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        thread = threading.Thread(target=run, name=f"tunnel-proxy->{self.target_port}", daemon=True)
        self._thread = thread
        thread.start()
        if not ready.wait(_CONTROL_TIMEOUT_S):
            raise TimeoutError("TunnelProxy did not start listening in time")
        if errors:
            self._thread = None
            thread.join(_CONTROL_TIMEOUT_S)
            raise errors[0]

    async def start_async(self) -> None:
        """Start listening on the running loop; the proxy then lives on that loop."""
        if self._server is not None:
            raise RuntimeError("TunnelProxy already started")
        self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()
        self._server = await asyncio.start_server(self._on_accept, self.listen_host, self.listen_port)
        self._port = self._server.sockets[0].getsockname()[1]
        log.info("tunnel proxy %s -> %s:%d", self.url, self.target_host, self.target_port)

    async def stop_async(self) -> None:
        """Stop listening, reset every connection and wait for the connection tasks to finish."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for conn in list(self._conns):
            self._abort(conn, count=False)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    def stop(self) -> None:
        """Stop the proxy from any thread other than its loop's (use :meth:`stop_async` there)."""
        loop = self._loop
        if loop is None or (self._server is None and self._thread is None):
            return
        if threading.get_ident() == self._loop_thread_id:
            raise RuntimeError("stop() called on the proxy's own loop; await stop_async() instead")
        if not loop.is_closed() and loop.is_running():
            asyncio.run_coroutine_threadsafe(self.stop_async(), loop).result(_CONTROL_TIMEOUT_S)
        thread, self._thread = self._thread, None
        if thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(_CONTROL_TIMEOUT_S)
            self._own_loop = None

    # ----------------------------------------------------------------- properties

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("TunnelProxy not started")
        return self._port

    @property
    def url(self) -> str:
        host = self.listen_host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"https://{host}:{self.port}"

    @property
    def connections_total(self) -> int:
        """Connections accepted since start, including refused and black-holed ones."""
        return self._connections_total

    @property
    def bytes_up(self) -> int:
        """Bytes delivered from clients to the target."""
        return self._bytes_up

    @property
    def bytes_down(self) -> int:
        """Bytes delivered from the target to clients."""
        return self._bytes_down

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    @property
    def resets_total(self) -> int:
        """Connections the proxy has reset (reset_all, refuse, restore, cuts)."""
        return self._resets_total

    # ----------------------------------------------------------------- control (thread-safe)

    def set_latency(self, seconds: float) -> None:
        """Delay every chunk by ``seconds`` in each direction (so a round trip gains twice that)."""
        if seconds < 0:
            raise ValueError("latency must be >= 0")
        with self._lock:
            self._latency = float(seconds)

    def reset_all(self) -> None:
        """Send a TCP RST on every open connection; the mode stays as it is."""
        self._in_loop(self._reset_all_now)

    def blackhole(self) -> None:
        """Hang existing and new connections: accept, but forward nothing in either direction."""
        with self._lock:
            self._mode = _Mode.BLACKHOLE
        self._in_loop(self._blackhole_now)

    def refuse(self) -> None:
        """Close new connections at once (RST) and reset the open ones."""
        with self._lock:
            self._mode = _Mode.REFUSE
        self._in_loop(self._reset_all_now)

    def restore(self, *, reset_blackholed: bool = True) -> None:
        """Forward new connections normally again. Black-holed connections are reset so that clients
        retry, or with ``reset_blackholed=False`` stay hung for ever, as behind a NAT that forgot them."""
        with self._lock:
            self._mode = _Mode.FORWARD
        if reset_blackholed:
            self._in_loop(self._reset_blackholed_now)

    def cut_every(self, min_s: float | None, max_s: float | None = None) -> None:
        """Reset each connection after a random lifetime in [min_s, max_s]; ``None`` disables.

        Applies to new connections and, counted from now, to the ones already open.
        """
        if min_s is None:
            cut: tuple[float, float] | None = None
        else:
            hi = min_s if max_s is None else max_s
            if min_s < 0 or hi < min_s:
                raise ValueError("cut_every needs 0 <= min_s <= max_s")
            cut = (float(min_s), float(hi))
        with self._lock:
            self._cut_range = cut
        self._in_loop(self._reschedule_cuts_now)

    # ----------------------------------------------------------------- loop-side helpers

    def _in_loop(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the proxy loop: directly when already there, else wait for it."""
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            fn()  # not serving: nothing runs concurrently with us
            return
        if threading.get_ident() == self._loop_thread_id:
            fn()
            return
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def call() -> None:
            try:
                fn()
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

        loop.call_soon_threadsafe(call)
        done.result(_CONTROL_TIMEOUT_S)

    def _reset_all_now(self) -> None:
        for conn in list(self._conns):
            self._abort(conn)

    def _blackhole_now(self) -> None:
        for conn in self._conns:
            conn.blackholed = True

    def _reset_blackholed_now(self) -> None:
        for conn in list(self._conns):
            if conn.blackholed:
                self._abort(conn)

    def _reschedule_cuts_now(self) -> None:
        for conn in self._conns:
            self._schedule_cut(conn)

    def _schedule_cut(self, conn: _Conn) -> None:
        if conn.cut_timer is not None:
            conn.cut_timer.cancel()
            conn.cut_timer = None
        cut = self._cut_range
        if cut is None or conn.closed or self._loop is None:
            return
        delay = self._rng.uniform(*cut)
        conn.cut_timer = self._loop.call_later(delay, self._abort, conn)

    def _abort(self, conn: _Conn, *, count: bool = True) -> None:
        """RST both sides of ``conn`` and cancel its task; idempotent."""
        if conn.closed:
            return
        conn.closed = True
        if count:
            self._resets_total += 1
        if conn.cut_timer is not None:
            conn.cut_timer.cancel()
            conn.cut_timer = None
        _rst(conn.client)
        _rst(conn.upstream)
        if conn.task is not None and conn.task is not asyncio.current_task():
            conn.task.cancel()

    # ----------------------------------------------------------------- connection handling

    def _on_accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(client=writer)
        self._connections_total += 1
        self._conns.add(conn)
        if self._mode is _Mode.REFUSE:
            self._abort(conn)
            self._conns.discard(conn)
            return
        task = asyncio.get_running_loop().create_task(self._serve(conn, reader))
        conn.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: _Conn, client_r: asyncio.StreamReader) -> None:
        try:
            self._schedule_cut(conn)
            if self._mode is _Mode.BLACKHOLE:
                conn.blackholed = True
                await self._swallow(client_r)
                await asyncio.Future()  # hang until reset (restore, reset_all, cut, stop)
            try:
                up_r, up_w = await asyncio.open_connection(self.target_host, self.target_port)
            except OSError as exc:
                log.debug("tunnel proxy: upstream connect failed: %s", exc)
                self._abort(conn)
                return
            conn.upstream = up_w
            if conn.closed:  # reset while we were connecting
                _rst(up_w)
                return
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._pipe(conn, client_r, up_w, up=True))
                tg.create_task(self._pipe(conn, up_r, conn.client, up=False))
            if not conn.closed:  # both directions ended with FIN: close gracefully, no RST
                conn.closed = True
                if conn.cut_timer is not None:
                    conn.cut_timer.cancel()
                conn.client.close()
                up_w.close()
        except asyncio.CancelledError:
            if not conn.closed:  # cancelled from outside our own reset path: propagate
                raise
        except Exception:
            log.warning("tunnel proxy: connection handler failed", exc_info=True)
        finally:
            if not conn.closed:
                self._abort(conn, count=False)
            self._conns.discard(conn)

    @staticmethod
    async def _swallow(reader: asyncio.StreamReader) -> None:
        """Read and drop everything, as a tunnel that drops packets would."""
        with contextlib.suppress(OSError):
            while await reader.read(_CHUNK):
                pass

    async def _pipe(
        self, conn: _Conn, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, up: bool
    ) -> None:
        """Copy one direction, delaying each chunk by the latency in force when it was read."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(maxsize=_QUEUE_CHUNKS)

        async def read_side() -> None:
            while True:
                data = await src.read(_CHUNK)
                if not data:
                    await queue.put(None)
                    return
                await queue.put((loop.time() + self._latency, data))

        async def write_side() -> None:
            while True:
                item = await queue.get()
                if item is None:
                    if conn.blackholed:
                        await asyncio.Future()  # a black hole forwards no FIN either
                    if dst.can_write_eof():
                        dst.write_eof()
                    return
                due, data = item
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if conn.blackholed or conn.closed:
                    continue
                dst.write(data)
                await dst.drain()
                if up:
                    self._bytes_up += len(data)
                else:
                    self._bytes_down += len(data)

        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(read_side())
                tg.create_task(write_side())
        except* OSError as group:
            log.debug("tunnel proxy: %s side failed: %s", "up" if up else "down", group.exceptions[0])
            self._abort(conn)
