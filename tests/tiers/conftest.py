"""Fixtures for the tier tests: a real, private redis-server and a three-node Redis Cluster,
each started for the whole session when a test asks for it."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

REDIS_START_TIMEOUT_S = 10.0
CLUSTER_NODES = 3
#: A cluster node also listens on its port + 10000 (the cluster bus).
CLUSTER_BUS_OFFSET = 10000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _cluster_ports(n: int) -> list[int]:
    """``n`` loopback ports that are free, each with its cluster-bus port free too."""
    ports: list[int] = []
    while len(ports) < n:
        port = random.randrange(20000, 30000)
        if port not in ports and _is_free(port) and _is_free(port + CLUSTER_BUS_OFFSET):
            ports.append(port)
    return ports


def _stop(proc: subprocess.Popen) -> None:
    """Stop one server started here, by its PID."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_for_cluster_ok(ports: list[int], timeout_s: float) -> str | None:
    """None once every node reports ``cluster_state:ok``, else why not."""
    import redis

    clients = [redis.Redis(host="127.0.0.1", port=p, socket_timeout=1.0) for p in ports]
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if all(c.cluster("info")["cluster_state"] == "ok" for c in clients):
                return None
            time.sleep(0.1)
        return f"the cluster did not reach cluster_state:ok within {timeout_s:.0f} s"
    finally:
        for client in clients:
            client.close()


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
        _stop(proc)


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory) -> Iterator[str]:
    """URL of one node of a real three-master Redis Cluster on loopback (no persistence).

    Three ``redis-server --cluster-enabled yes`` nodes are joined by ``redis-cli --cluster
    create``; they are stopped by PID afterwards. The tests that use it are skipped, with
    the reason, when redis-server has no cluster support or redis-cli is missing.
    """
    binary, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if binary is None or cli is None:
        pytest.skip("redis-server and redis-cli are not installed (Debian package redis-server)")
    folder = Path(tmp_path_factory.mktemp("cluster"))
    ports = _cluster_ports(CLUSTER_NODES)
    procs = [subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly",
         "no", "--cluster-enabled", "yes", "--cluster-config-file",
         str(folder / f"nodes-{port}.conf"), "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for port in ports]
    try:
        for port, proc in zip(ports, procs):
            failure = _wait_for_ping(f"redis://127.0.0.1:{port}/0", proc, REDIS_START_TIMEOUT_S)
            if failure is not None:
                proc.kill()
                _, err = proc.communicate()
                pytest.skip(f"redis-server without cluster support? {failure}: "
                            f"{err.decode(errors='replace').strip()[-300:]}")
        create = subprocess.run(
            [cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=60)
        if create.returncode != 0:
            pytest.skip(f"redis-cli --cluster create failed: {create.stdout[-300:]}"
                        f"{create.stderr[-300:]}")
        failure = _wait_for_cluster_ok(ports, REDIS_START_TIMEOUT_S)
        if failure is not None:
            pytest.skip(failure)
        yield f"redis://127.0.0.1:{ports[0]}/0"
    finally:
        for proc in procs:
            _stop(proc)
