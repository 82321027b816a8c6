"""``make priors``: refit the shipped threshold priors and calibration curves
(:mod:`mmcache.thresholds.prior`) on the training split of the labelled pairs."""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import Sequence

from mmcache.datasets.pairs import PAIRS_PROVENANCE, PairSizes, load_pairs
from mmcache.encoders import EmbeddingStore, get_encoder
from mmcache.errors import MMCacheError
from mmcache.studies import alignment
from mmcache.studies.threshold_study import STUDY_ENCODERS, fit_priors, score_pairs
from mmcache.thresholds.prior import PRIORS_PATH

#: The pairs seed whose training split the shipped priors are fitted on (notebook 02's
#: ``PAIR_SEED``: its held-out split is never read here).
PRIOR_SEED = 0


def main(argv: Sequence[str] = ()) -> Path:
    """Fit every study channel (:data:`mmcache.studies.threshold_study.STUDY_ENCODERS`) on the
    training split of :func:`mmcache.datasets.pairs.load_pairs`, unconditioned and
    conditioned on the built-in ``edits`` verifier, and write :data:`PRIORS_PATH` (or
    ``argv[0]``). A modality whose encoder is not available (e.g. CLIP before ``make
    models``) is left out and named in the provenance."""
    encoders, missing = {}, {}
    for modality, (name, kw) in STUDY_ENCODERS.items():
        try:
            encoders[modality] = get_encoder(name, **kw)
        except MMCacheError as err:
            missing[modality] = str(err)
    whisper = encoders.get("audio")
    pairs = load_pairs("train", seed=PRIOR_SEED, modalities=list(encoders), sizes=PairSizes())
    scores = score_pairs(pairs, encoders=encoders, store=EmbeddingStore(), transcribe=None
                         if whisper is None else
                         lambda clips: alignment.transcribe(whisper.model, clips))
    provenance = {
        "data": f"mmcache.datasets.pairs.load_pairs('train', seed={PRIOR_SEED}, PairSizes()): "
                f"{len(pairs)} pairs; {PAIRS_PROVENANCE}",
        "split": "train", "seed": PRIOR_SEED, "missing_encoders": missing,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "python -m mmcache.studies.priors (make priors)"}
    return fit_priors(scores, Path(argv[0]) if argv else PRIORS_PATH, provenance=provenance)


if __name__ == "__main__":
    print(main(sys.argv[1:]))
