"""Fixtures for the tier tests: a real, private redis-server and a three-node Redis Cluster,
each started for the whole session when a test asks for it."""

from __future__ import annotations

import contextlib
from typing import Iterator

import pytest

from cache_helpers import private_redis
from mmcache.errors import StorageError
from mmcache.lab.testing import local_redis_cluster

REDIS_START_TIMEOUT_S = 10.0


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> Iterator[str]:
    """URL of a real Debian redis-server on a free loopback port (no persistence).

    The server (:class:`mmcache.lab.testing.LocalRedis`) is started for this session and
    stopped by its PID afterwards; the tests that use it are skipped, with the reason, when
    the binary cannot start.
    """
    with private_redis(tmp_path_factory.mktemp("redis"), REDIS_START_TIMEOUT_S) as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory) -> Iterator[str]:
    """URL of one node of a real three-master Redis Cluster on loopback (no persistence).

    Started for this session by :func:`mmcache.lab.testing.local_redis_cluster` (three
    ``redis-server --cluster-enabled yes`` nodes joined by ``redis-cli --cluster create``)
    and stopped by PID afterwards; the tests that use it are skipped, with the reason, when
    redis-server has no cluster support or redis-cli is missing.
    """
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(local_redis_cluster(tmp_path_factory.mktemp("cluster")))
        except StorageError as exc:
            pytest.skip(f"no local Redis Cluster: {exc}")
        yield url
