"""The encoder benchmark runs at a tiny size and prints its two ratio lines.

Timings are not asserted; the equivalence numbers are (a trimmed-context
embedding must retrieve its own full-context twin).
"""

from __future__ import annotations

import re

import pytest

from mmcache.lab.bench import encoders as encoder_bench


def test_quick_run_prints_both_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    encoder_bench.main(["--quick"])
    out = capsys.readouterr().out
    assert re.search(r"RATIO whisper full/trimmed time: \d+\.\dx", out), out
    assert re.search(r"RATIO store first/second pass: \d+x", out), out
    assert "twin R@1 1.00" in out


def test_prompts_have_distinct_spoken_transcripts() -> None:
    clips, texts = encoder_bench.asterisk_prompts(20)
    assert len(clips) == len(texts) == 20
    assert len({t.lower() for t in texts}) == 20 and not any("[" in t for t in texts)
    assert all(c.dtype.name == "float32" and 0 < c.size < 10 * 16_000 for c in clips)
