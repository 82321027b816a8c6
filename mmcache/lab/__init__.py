"""The lab harness: runbook, figures, sweeps, the docs check, plotting, benchmarks, test helpers
and CLIP training."""
