"""Sweep workers share one Redis L3 (one server, or a cluster), and scopes keep points apart.

Each point of a local-engine sweep (:mod:`mmcache.lab.sweep`, one process per point) opens its
own TieredCache on the same Redis store in its own scope (``shared_l3_point.probe``). Every
scope holds the same questions, so a point that saw another scope's answer would count it.
"""

from __future__ import annotations

import time

import pytest

from mmcache.lab.sweep import parse_spec, run_sweep

from shared_l3_point import QUESTIONS

SCOPES = ["tenant-a", "tenant-b", "tenant-c"]


def _sweep(url: str, prefix: str, cluster: bool, scopes: list[str], write: bool, out) -> dict:
    spec = parse_spec({"name": "write" if write else "read", "function": "shared_l3_point:probe",
                       "parameters": {"url": url, "prefix": prefix, "cluster": cluster,
                                      "write": write},
                       "grid": {"scope": scopes}})
    report = run_sweep(spec, out, progress=False)
    assert report.failed == 0, report.table.get("error")
    return {row.scope: (row.own, row.foreign, row.missing) for row in report.table.itertuples()}


@pytest.mark.parametrize("cluster", [False, True], ids=["redis", "redis-cluster"])
def test_sweep_points_share_one_l3_and_never_see_another_scope(cluster, request,
                                                               tmp_path) -> None:
    url = request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
    prefix = f"sweep-{time.monotonic_ns()}"
    both = 2 * QUESTIONS  # each question looked up exactly and by a paraphrase
    written = _sweep(url, prefix, cluster, SCOPES, True, tmp_path / "write")
    assert written == {scope: (both, 0, 0) for scope in SCOPES}
    read = _sweep(url, prefix, cluster, [*SCOPES, "tenant-unwritten"], False, tmp_path / "read")
    assert read == {**{scope: (both, 0, 0) for scope in SCOPES},   # other processes' writes
                    "tenant-unwritten": (0, 0, both)}
