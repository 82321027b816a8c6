"""Fixtures for the tier tests: a real, private redis-server and a three-node Redis Cluster,
each started for the whole session when a test asks for it."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from typing import Iterator

import pytest

from mmcache.lab.testing import stop_process

REDIS_START_TIMEOUT_S = 10.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_ping(url: str, proc: subprocess.Popen, timeout_s: float) -> str | None:
    """None once the server answers PING, else why it did not."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=1.0)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"redis-server exited with status {proc.returncode}"
            try:
                if client.ping():
                    return None
            except redis.ConnectionError:
                time.sleep(0.05)
        return f"redis-server did not answer PING within {timeout_s:.0f} s"
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Debian redis-server on a free loopback port (no persistence).

    The server is started for this session and stopped by its PID afterwards; the
    tests that use it are skipped, with the reason, when the binary cannot start.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"redis://127.0.0.1:{port}/0"
    failure = _wait_for_ping(url, proc, REDIS_START_TIMEOUT_S)
    if failure is not None:
        proc.kill()
        _, err = proc.communicate()
        pytest.skip(f"{failure}: {err.decode(errors='replace').strip()[-300:]}")
    try:
        yield url
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory) -> Iterator[str]:
    """URL of one node of a real three-master Redis Cluster on loopback (no persistence).

    Started for this session by :func:`mmcache.lab.testing.local_redis_cluster` (three
    ``redis-server --cluster-enabled yes`` nodes joined by ``redis-cli --cluster create``)
    and stopped by PID afterwards; the tests that use it are skipped, with the reason, when
    redis-server has no cluster support or redis-cli is missing.
    """
    from mmcache.errors import StorageError
    from mmcache.lab.testing import local_redis_cluster

    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(local_redis_cluster(tmp_path_factory.mktemp("cluster")))
        except StorageError as exc:
            pytest.skip(f"no local Redis Cluster: {exc}")
        yield url
