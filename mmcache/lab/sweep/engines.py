"""Where points run: a local process pool, or Ray (a cluster, or a local instance).

Both engines take ``(index, (kind, target, params))`` tasks and yield
``(index, PointOutcome)`` as points finish. ``needs`` maps a task's index to its
prerequisite (``module:function``), run once before the first task that needs it; a
failed prerequisite fails its tasks. Closing the generator early (Ctrl-C) cancels what
has not finished and stops the workers.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Iterator, Mapping

from mmcache.errors import ConfigError
from mmcache.lab.sweep.point import PointOutcome, run_point, run_prerequisite
from mmcache.lab.sweep.spec import Resources

Task = tuple[int, tuple[str, str, Mapping[str, Any]]]
ENGINES = ("local", "ray")
#: Ray on these machines: loopback only, no auth tokens, no usage reporting.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0"}
LOOPBACK = "127.0.0.1"
# Ray reads these when it is first imported, so they are set as soon as sweeps are.
for _key, _value in RAY_ENV.items():
    os.environ.setdefault(_key, _value)


def available_cpus() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0))


def run_points(engine: str, tasks: list[Task], resources: Resources,
               address: str | None = None,
               needs: Mapping[int, str] | None = None) -> Iterator[tuple[int, PointOutcome]]:
    """Run ``tasks`` on ``engine`` ("local" or "ray"), yielding outcomes as they finish."""
    if engine == "local":
        if address is not None:
            raise ConfigError("--address applies to --engine ray only")
        return run_local(tasks, resources, needs or {})
    if engine == "ray":
        return run_ray(tasks, resources, address, needs or {})
    raise ConfigError(f"unknown engine {engine!r}; choose one of {list(ENGINES)}")


def point_threads(resources: Resources) -> int:
    """Threads one point may use: its whole CPU cores, at least one."""
    return max(1, int(resources.cpus))


def run_local(tasks: list[Task], resources: Resources,
              needs: Mapping[int, str]) -> Iterator[tuple[int, PointOutcome]]:
    """A process pool with one worker per ``resources.cpus`` cores (at least one).

    Tasks start in the given order as workers come free, passing over those whose
    prerequisite has not finished; a prerequisite takes a worker when its first task
    comes up, so the other tasks use the remaining workers meanwhile.
    """
    if not tasks:
        return
    workers = max(1, min(len(tasks), int(available_cpus() // resources.cpus)))
    threads = point_threads(resources)
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(workers, mp_context=_worker_context(), initializer=_ignore_sigint)
    queue = dict(tasks)
    prerequisites: dict[str, Future] = {}
    running: dict[Future, int] = {}
    finished = False
    try:
        while queue or running:
            free = workers - len(running) - sum(not f.done() for f in prerequisites.values())
            for index in list(queue):
                need = needs.get(index)
                if need is not None and need not in prerequisites:
                    if free > 0:
                        prerequisites[need] = pool.submit(run_prerequisite, need, threads)
                        free -= 1
                elif need is not None and not prerequisites[need].done():
                    continue
                elif need is not None and prerequisites[need].exception() is not None:
                    del queue[index]
                    yield index, _prerequisite_failed(need, prerequisites[need].exception())
                elif free > 0:
                    running[pool.submit(run_point, *queue.pop(index), threads)] = index
                    free -= 1
            pending = [f for f in (*running, *prerequisites.values()) if not f.done()]
            if pending:
                wait(pending, return_when=FIRST_COMPLETED)
            # every finished point, also one that finished before `pending` was taken (left in
            # `running`, it would hold its worker slot and spin this loop forever)
            for future in [f for f in running if f.done()]:
                yield running.pop(future), _local_outcome(future)
        finished = True
    finally:
        pool.shutdown(wait=finished, cancel_futures=True)
        if not finished:  # interrupted: stop the points still running
            for child in set(multiprocessing.active_children()) - before:
                child.terminate()
                child.join()


def run_ray(tasks: list[Task], resources: Resources, address: str | None,
            needs: Mapping[int, str]) -> Iterator[tuple[int, PointOutcome]]:
    """Ray tasks with the spec's resources on the cluster at ``address``, else on a local head.

    An already initialised Ray connection (``ray.init`` in a notebook) is used as is.
    Prerequisites run first, as Ray tasks; a point that needs one is submitted after it.
    """
    if not tasks:
        return
    ray = _import_ray()
    with contextlib.ExitStack() as stack:
        if not ray.is_initialized():
            if address is None:
                stack.enter_context(local_ray_head(available_cpus()))
            else:
                ray.init(address=address, log_to_driver=False)
                stack.callback(ray.shutdown)
        options: dict[str, Any] = {"num_cpus": resources.cpus, "num_gpus": resources.gpus,
                                   "max_retries": 0}
        if resources.memory_mb is not None:
            options["memory"] = int(resources.memory_mb * 2**20)
        remote = ray.remote(run_point).options(**options)
        threads = point_threads(resources)
        prepared = {name: ray.remote(run_prerequisite).options(**options).remote(name, threads)
                    for name in set(needs.values())}
        failed = {}
        for name, ref in prepared.items():
            try:
                ray.get(ref)
            except Exception as err:  # its points fail; the others run
                failed[name] = err
        for index, _ in tasks:
            if needs.get(index) in failed:
                yield index, _prerequisite_failed(needs[index], failed[needs[index]])
        pending = {remote.remote(*task, threads): index for index, task in tasks
                   if needs.get(index) not in failed}
        try:
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                yield pending.pop(ref), _ray_outcome(ray, ref)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)


@contextlib.contextmanager
def local_ray_head(num_cpus: int, timeout_s: float = 180.0) -> Iterator[str]:
    """Start a one-node Ray head on loopback and connect to it; yields its address.

    The head runs as ``ray start --head --block`` with every port fixed up front, so
    its raylet does not wait for the agents' port files (it aborts after 15 s when a
    loaded machine starts them slowly). It is stopped by its PID, never with
    ``ray stop``, which would stop every Ray instance on the machine.
    """
    ray = _import_ray()
    ports = _free_ports(5)
    temp_dir = tempfile.mkdtemp(prefix="mmray-", dir="/tmp")  # socket paths stay < 107 bytes
    log = Path(temp_dir) / "head.log"
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
               f"--node-ip-address={LOOPBACK}", f"--port={ports[0]}", f"--num-cpus={num_cpus}",
               f"--temp-dir={temp_dir}", "--include-dashboard=false", "--disable-usage-stats",
               f"--dashboard-agent-grpc-port={ports[1]}",
               f"--dashboard-agent-listen-port={ports[2]}", f"--metrics-export-port={ports[3]}",
               f"--runtime-env-agent-port={ports[4]}"]
    address = f"{LOOPBACK}:{ports[0]}"
    with log.open("wb") as log_file:
        head = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                env={**os.environ, **RAY_ENV})
    try:
        _connect_when_up(ray, head, address, log, timeout_s)
        yield address
    finally:
        ray.shutdown()
        head.terminate()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _connect_when_up(ray: Any, head: subprocess.Popen, address: str, log: Path,
                     timeout_s: float) -> None:
    """``ray.init(address)`` as soon as the head answers; raise if it exits or takes too long."""
    deadline = time.monotonic() + timeout_s
    while True:
        if head.poll() is not None:
            raise RuntimeError(f"the local Ray head exited with {head.returncode}:\n"
                               f"{log.read_text(errors='replace')[-2000:]}")
        try:
            ray.init(address=address, log_to_driver=False)
            return
        except Exception:  # not up yet (ConnectionError, or a GCS timeout)
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on loopback."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(n)]
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in sockets]


def _import_ray() -> Any:
    try:
        # deferred: Ray only for the ray sweep engine
        import ray
    except ImportError as err:
        raise ConfigError("--engine ray needs Ray: pip install ray==2.60.0") from err
    return ray


def _worker_context() -> multiprocessing.context.BaseContext:
    """Workers fork from a clean server that has imported the point runner once per driver.

    (Forking the driver itself would copy its threads' locks; spawning anew re-imports
    pandas and matplotlib in every worker of every sweep.)
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["mmcache.lab.sweep.point", "mmcache.lab.runbook"])
    return context


def _prerequisite_failed(name: str, err: BaseException) -> PointOutcome:
    """The outcome of a point whose prerequisite ``name`` raised ``err`` (the point never ran)."""
    return PointOutcome.failure(RuntimeError(f"prerequisite {name} failed: {err!r}"))


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
