"""Helpers for tests and experiments: a hand-driven clock, vectors at a chosen cosine, a
private redis-server that faults can be injected into, a throwaway local Redis Cluster, and
processes started at one signal."""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from mmcache.errors import StorageError

#: A cluster node also listens on its port + 10000 (the cluster bus).
CLUSTER_BUS_OFFSET = 10000


def unit(rng: np.random.Generator, dim: int = 32) -> np.ndarray:
    """A random unit float32 vector."""
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def near(rng: np.random.Generator, v: np.ndarray, cos: float) -> np.ndarray:
    """A unit float32 vector whose cosine similarity to unit vector ``v`` is ``cos``."""
    w = rng.standard_normal(len(v))
    w -= (w @ v) * v
    w /= np.linalg.norm(w)
    return (cos * v + np.sqrt(1 - cos**2) * w).astype(np.float32)


def started_together(ctx: Any, target: Callable[..., None], arg_lists: Sequence[tuple],
                     timeout: float = 30.0) -> list[Any]:
    """Run ``target(*args, start, pipe)`` in one process of ``ctx`` (a multiprocessing
    context) per ``args`` of ``arg_lists``, set ``start`` once all have started, and return
    the first thing each sent through its ``pipe``, in order, after joining them."""
    start, pipes, procs = ctx.Event(), [], []
    for args in arg_lists:
        mine, theirs = ctx.Pipe(duplex=False)
        procs.append(ctx.Process(target=target, args=(*args, start, theirs)))
        procs[-1].start()
        pipes.append(mine)
    start.set()
    results = [pipe.recv() for pipe in pipes]
    for proc in procs:
        proc.join(timeout)
    return results


class FakeClock:
    """A clock (seconds) that moves only when told: pass it as ``TieredCache(clock=...)``."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += seconds


class LocalRedis:
    """A private redis-server on a free loopback port, its files under ``folder``, that a
    test can restart, kill and flush: ``args`` are extra server options (default: no
    persistence). Use it as a context manager; it is stopped by its PID on exit."""

    def __init__(self, folder: str | Path, *args: str, timeout_s: float = 10.0) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise StorageError("a local Redis needs redis-server (Debian package redis-server)")
        self.folder, self.args, self.timeout_s = Path(folder), args, timeout_s
        self.port = _cluster_ports(1)[0]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "LocalRedis":
        """Start the server (again, on the same port and files) and wait for its PING."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir",
             str(self.folder), *(self.args or ("--save", "", "--appendonly", "no"))],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _wait_until(lambda: _node_answers(self.port, self.proc), self.timeout_s,
                        f"redis-server on port {self.port} did not answer PING")
        except BaseException:
            self.stop(kill=True)
            raise
        return self

    def stop(self, kill: bool = False) -> None:
        """Stop the server: SIGTERM (it saves if told to persist), or ``kill -9``."""
        if self.proc is not None:
            if kill:
                self.proc.kill()
                self.proc.wait()
            else:
                stop_process(self.proc)
            self.proc = None

    def restart(self, kill: bool = False) -> None:
        """Stop the server (``kill``: without a chance to save) and start it again."""
        self.stop(kill)
        self.start()

    def __enter__(self) -> "LocalRedis":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(kill=True)


class FaultProxy:
    """A TCP proxy on a free loopback port in front of ``upstream`` (``host``, ``port``) that
    a test can make misbehave: ``mode`` ``"pass"`` forwards every byte, ``"blackhole"``
    swallows them (the peer waits for answers that never come). Use it as a context
    manager."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream, self.mode = upstream, "pass"
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._closed = False

    def url(self, db: int = 0) -> str:
        """A Redis URL that reaches ``upstream`` through this proxy."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def retarget(self, upstream: tuple[str, int]) -> None:
        """Send new connections to ``upstream`` and cut the open ones (a failover)."""
        self.upstream = upstream
        sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def __enter__(self) -> "FaultProxy":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:  # the upstream is down: refuse, as it would
                client.close()
                continue
            self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Forward ``source`` to ``sink`` until either closes; then close both, as a peer
        that went away would."""
        try:
            while not self._closed:
                chunk = source.recv(65536)
                if not chunk:
                    break
                if self.mode != "blackhole":
                    sink.sendall(chunk)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def local_redis_cluster(folder: str | Path, nodes: int = 3,
                        timeout_s: float = 10.0) -> Iterator[str]:
    """A Redis Cluster of ``nodes`` masters on loopback, without persistence, for tests and
    benchmarks: yields the URL of one node, and stops every server by its PID on exit.

    The nodes are ``redis-server --cluster-enabled yes`` (their config files under
    ``folder``) joined by ``redis-cli --cluster create``, ready once each reports
    ``cluster_state:ok``. StorageError, with the servers' own words, when redis-server or
    redis-cli is missing, has no cluster support, or the cluster does not form in time.
    """
    binary, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if binary is None or cli is None:
        raise StorageError("a local Redis Cluster needs redis-server and redis-cli "
                           "(Debian package redis-server)")
    folder = Path(folder)
    ports = _cluster_ports(nodes)
    procs: list[subprocess.Popen] = []
    try:
        for port in ports:
            procs.append(subprocess.Popen(
                [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                 "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file",
                 str(folder / f"nodes-{port}.conf"), "--dir", str(folder)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        for port, proc in zip(ports, procs):
            _wait_until(lambda p=port: _node_answers(p, proc), timeout_s,
                        f"redis-server (cluster node {port}) did not answer PING")
        create = subprocess.run([cli, "--cluster", "create",
                                 *[f"127.0.0.1:{p}" for p in ports],
                                 "--cluster-replicas", "0", "--cluster-yes"],
                                capture_output=True, text=True, timeout=60)
        if create.returncode != 0:
            raise StorageError(f"redis-cli --cluster create failed: "
                               f"{(create.stdout + create.stderr)[-300:]}")
        _wait_until(lambda: all(_cluster_ok(p) for p in ports), timeout_s,
                    "the cluster did not reach cluster_state:ok")
        yield f"redis://127.0.0.1:{ports[0]}/0"
    finally:
        for proc in procs:
            stop_process(proc)


def _cluster_ports(n: int) -> list[int]:
    """``n`` free loopback ports whose cluster-bus ports are free too."""
    ports: list[int] = []
    while len(ports) < n:
        port = random.randrange(20000, 30000)
        if port not in ports and _is_free(port) and _is_free(port + CLUSTER_BUS_OFFSET):
            ports.append(port)
    return ports


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _node_answers(port: int, proc: subprocess.Popen) -> bool:
    """Whether the node answers PING (StorageError, with its stderr, once it has exited)."""
    # deferred: redis-py only where a Redis store is used
    import redis

    if proc.poll() is not None:
        err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
        raise StorageError(f"redis-server exited with status {proc.returncode} (no cluster "
                           f"support?): {err[-300:]}")
    try:
        with redis.Redis(host="127.0.0.1", port=port, socket_timeout=1.0) as client:
            return bool(client.ping())
    except redis.ConnectionError:
        return False


def _cluster_ok(port: int) -> bool:
    # deferred: redis-py only where a Redis store is used
    import redis

    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=1.0) as client:
        return client.cluster("info")["cluster_state"] == "ok"


def _wait_until(ready, timeout_s: float, what: str) -> None:
    """Poll ``ready()`` until it is true; StorageError ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise StorageError(f"{what} within {timeout_s:.0f} s")
        time.sleep(0.05)


def stop_process(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """Terminate ``proc`` and wait for it, killing it if it has not exited within ``timeout``
    seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
