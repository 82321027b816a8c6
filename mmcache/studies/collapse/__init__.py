"""Cold-start collapse of cross-modal attention: a small matcher, its instruments, the sweep."""

from __future__ import annotations

from mmcache.studies.collapse.experiment import (SEED_COMBO, CollapseCriterion, Remedy, RunResult,
                                                 TrainConfig, best_pair, collapse_step,
                                                 curves_table, rank_arms, remedy_effect,
                                                 remedy_verdicts,
                                                 runs_table, single_remedies, summarise, sweep,
                                                 sweep_tables, train_run, tuned_lr, tuning_check,
                                                 wilson_interval)
from mmcache.studies.collapse.features import FROZEN, LEARNED, FrozenFeatures, frozen_features
from mmcache.studies.collapse.instruments import (StepRecorder, adam_update_stats,
                                                  attention_entropy, head_grad_norms, max_logit,
                                                  modality_mass, qk_spectral_norms)
from mmcache.studies.collapse.model import (AttentionRecord, BlockConfig, CrossModalMatcher,
                                            matching_loss)

__all__ = [
    "FROZEN", "LEARNED", "SEED_COMBO", "AttentionRecord", "BlockConfig", "CollapseCriterion",
    "CrossModalMatcher", "FrozenFeatures", "frozen_features",
    "Remedy", "RunResult", "StepRecorder", "TrainConfig", "adam_update_stats",
    "attention_entropy", "best_pair", "collapse_step", "curves_table", "head_grad_norms",
    "matching_loss", "max_logit", "modality_mass", "qk_spectral_norms", "rank_arms",
    "remedy_effect", "remedy_verdicts", "runs_table", "single_remedies", "summarise", "sweep", "sweep_tables",
    "train_run",
    "tuned_lr", "tuning_check", "wilson_interval",
]
