"""How a result moves with the assumed text inference time.

Text is the one modality whose miss cost stays an assumption (no language model is served
here: :data:`mmcache.sim.latency.ASSUMED_TEXT_INFERENCE`); image and audio misses cost the
measured CLIP and Whisper calls. :func:`text_inference_sensitivity` recomputes a notebook's
headline with the text median at half, once and twice the assumed value.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import pandas as pd

from mmcache.sim.latency import LatencyModel

#: The multiples of the assumed text inference median a headline is recomputed at.
TEXT_INFERENCE_FACTORS: tuple[float, ...] = (0.5, 1.0, 2.0)


def factor_label(factor: float) -> str:
    """``"0.5x"``, ``"1x"``, ``"2x"``: a factor as the metrics name it."""
    return f"{factor:g}x"


def text_inference_sensitivity(compute: Callable[[LatencyModel], Mapping[str, float]],
                               latency: LatencyModel,
                               factors: Sequence[float] = TEXT_INFERENCE_FACTORS
                               ) -> pd.DataFrame:
    """``compute``'s quantities (columns) under ``latency`` with its text inference median
    scaled by each of ``factors`` (rows, labelled ``"0.5x"``, ...; the rest of the model kept)."""
    rows = {factor_label(f): dict(compute(latency.with_text_inference_scaled(f)))
            for f in factors}
    frame = pd.DataFrame.from_dict(rows, orient="index").astype(float)
    frame.index.name = "text inference"
    return frame


def sensitivity_metrics(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """The table as metrics: ``{quantity: {"0.5x": value, "1x": value, "2x": value}}``."""
    return {column: {k: float(v) for k, v in frame[column].items()} for column in frame}
