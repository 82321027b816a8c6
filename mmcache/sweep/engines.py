"""Where points run: a local process pool, or Ray (a cluster, or a local instance).

Both engines take ``(index, (kind, target, params))`` tasks and yield
``(index, PointOutcome)`` as points finish. Closing the generator early (Ctrl-C)
cancels what has not finished and stops the workers.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import tempfile
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, Iterator, Mapping

from ..errors import ConfigError
from .point import PointOutcome, run_point
from .spec import Resources

Task = tuple[int, tuple[str, str, Mapping[str, Any]]]
ENGINES = ("local", "ray")
#: Ray on these machines: loopback only, no auth tokens, no usage reporting.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0"}


def available_cpus() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0))


def run_points(engine: str, tasks: list[Task], resources: Resources,
               address: str | None = None) -> Iterator[tuple[int, PointOutcome]]:
    """Run ``tasks`` on ``engine`` ("local" or "ray"), yielding outcomes as they finish."""
    if engine == "local":
        if address is not None:
            raise ConfigError("--address applies to --engine ray only")
        return run_local(tasks, resources)
    if engine == "ray":
        return run_ray(tasks, resources, address)
    raise ConfigError(f"unknown engine {engine!r}; choose one of {list(ENGINES)}")


def run_local(tasks: list[Task], resources: Resources) -> Iterator[tuple[int, PointOutcome]]:
    """A process pool with one worker per ``resources.cpus`` cores (at least one)."""
    if not tasks:
        return
    workers = max(1, min(len(tasks), int(available_cpus() // resources.cpus)))
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_ignore_sigint)
    futures = {pool.submit(run_point, *task): index for index, task in tasks}
    children = set(multiprocessing.active_children()) - before
    finished = False
    try:
        for future in as_completed(futures):
            yield futures[future], _local_outcome(future)
        finished = True
    finally:
        pool.shutdown(wait=finished, cancel_futures=True)
        if not finished:  # interrupted: stop the points still running
            for child in children:
                child.terminate()
                child.join()


def run_ray(tasks: list[Task], resources: Resources,
            address: str | None) -> Iterator[tuple[int, PointOutcome]]:
    """Ray tasks with the spec's resources; connects to ``address`` or starts a local instance.

    An already initialised Ray connection (``ray.init`` in a notebook) is used as is.
    """
    if not tasks:
        return
    for key, value in RAY_ENV.items():
        os.environ.setdefault(key, value)
    try:
        import ray
    except ImportError as err:
        raise ConfigError("--engine ray needs Ray: pip install ray==2.60.0") from err
    started = not ray.is_initialized()
    temp_dir = _init_ray(ray, address) if started else None
    options: dict[str, Any] = {"num_cpus": resources.cpus, "num_gpus": resources.gpus,
                               "max_retries": 0}
    if resources.memory_mb is not None:
        options["memory"] = int(resources.memory_mb * 2**20)
    remote = ray.remote(run_point).options(**options)
    pending = {remote.remote(*task): index for index, task in tasks}
    try:
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            yield pending.pop(ref), _ray_outcome(ray, ref)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


def _init_ray(ray: Any, address: str | None) -> str | None:
    """Connect to ``address``, or start a local instance; returns the temp dir it made, if any."""
    if address is not None:
        ray.init(address=address, log_to_driver=False)
        return None
    # Unix socket paths must stay under 107 bytes: a short folder directly in /tmp.
    temp_dir = tempfile.mkdtemp(prefix="mmray-", dir="/tmp")
    ray.init(address="local", num_cpus=available_cpus(), include_dashboard=False,
             log_to_driver=False, _temp_dir=temp_dir)
    return temp_dir


def _local_outcome(future: Future) -> PointOutcome:
    try:
        return future.result()
    except Exception as err:  # the worker died (BrokenProcessPool) or the result would not pickle
        return PointOutcome.failure(err)


def _ray_outcome(ray: Any, ref: Any) -> PointOutcome:
    try:
        return ray.get(ref)
    except Exception as err:  # a lost worker or node; the point itself never raises
        return PointOutcome.failure(err)


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the driver, which stops them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
