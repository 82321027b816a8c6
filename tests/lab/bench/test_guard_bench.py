"""Guard benchmark, tiny: the guard only ever skips guaranteed misses."""

from __future__ import annotations

import numpy as np

from mmcache.lab.bench.guard import clustered_set, run
from mmcache.lab.testing import near


def test_guard_changes_no_answer_and_skips_far_queries(tmp_path):
    rng = np.random.default_rng(0)
    stored, far = clustered_set(300, 40, 64, rng)
    close = np.stack([near(rng, stored[i], 0.97) for i in range(40)])
    result = run(stored, np.concatenate([close, far]), tmp_path)
    assert result["disagreements"] == 0
    assert result["hits"] == 40
    assert result["cap_skips_l2"] == 40 and result["bloom_skips_l3"] == 80
