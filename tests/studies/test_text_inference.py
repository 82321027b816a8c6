"""Sensitivity to the assumed text inference time: each factor scales text alone."""

from __future__ import annotations

import pytest

from mmcache.sim.latency import LatencyModel, LogNormal
from mmcache.studies.text_inference import sensitivity_metrics, text_inference_sensitivity


def test_each_row_scales_the_text_median_and_keeps_the_measured_costs():
    base = LatencyModel.measured(servers=2)
    seen = []

    def compute(model: LatencyModel) -> dict[str, float]:
        seen.append({m: model.inference_ms[m] for m in ("image", "audio")})
        return {"text_median_ms": model.inference_ms["text"].median_ms}

    frame = text_inference_sensitivity(compute, base)
    assumed = base.inference_ms["text"].median_ms
    assert list(frame.index) == ["0.5x", "1x", "2x"]
    assert sensitivity_metrics(frame) == {"text_median_ms": {
        "0.5x": pytest.approx(assumed / 2), "1x": pytest.approx(assumed),
        "2x": pytest.approx(2 * assumed)}}
    assert all(s == {m: base.inference_ms[m] for m in ("image", "audio")} for s in seen)


def test_a_constant_text_cost_is_scaled_too():
    model = LatencyModel(servers=1).with_text_inference_scaled(0.5)
    assert model.inference_ms["text"] == LogNormal(200.0, 0.0, "given constant; median × 0.5")
