"""The shard benchmark runs on its own local cluster and reports the hot scope, only."""

from __future__ import annotations

import re
import shutil

import pytest

from mmcache.lab.bench import redis_shards as shard_bench


@pytest.mark.skipif(shutil.which("redis-server") is None or shutil.which("redis-cli") is None,
                    reason="redis-server and redis-cli are not installed")
def test_the_hot_scope_alone_is_alerted_and_every_shard_counts_its_commands(capsys) -> None:
    shard_bench.main(["--rounds", "60"])
    out = capsys.readouterr().out
    alerted = dict(re.findall(r"  (.+?): [\d.]+ requests per cache call; .*windows alerted (\d+)",
                              out))
    assert set(alerted) == {"12 scopes, 4 per shard", "12 scopes placed by hash", "one hot scope"}
    assert alerted["12 scopes, 4 per shard"] == "0" and int(alerted["one hot scope"]) >= 1
    assert len(re.findall(r"EVAL +\[\d+, \d+, \d+\]", out)) == 3
    assert "with one global sequence + log (on 127.0.0.1:" in out
