"""The learned pair verifier's leave-one-source-out report, recorded in the benchmark ledger.

``python -m mmcache.lab.bench.verifier_report`` (``make bench-verifier``) fits the verifier as
``make verifier`` does (:func:`mmcache.studies.pair_verifier.fit_and_report`) without writing
the shipped model, prints the report, and records per measured set its n, ROC AUC, the shares
of same / different pairs passed, Brier score and ECE, and the model's coefficients, in
``runs/bench/verifier_report.json``: the docs check tests the report that
``docs/results/02-thresholds.md`` prints against it.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from mmcache.lab.bench.ledger import Ratio, machine, record
from mmcache.studies.pair_verifier import SEED, fit_and_report, format_report
from mmcache.verify.pair_model import FEATURES, PairModel

#: The report's scores per measured set: key of the report -> (figure name, ledger unit).
SCORES = {"n": ("n", "count"), "auc": ("AUC", "score"), "passes_same": ("pass same", "fraction"),
          "passes_different": ("pass different", "fraction"), "brier": ("Brier", "score"),
          "ece": ("ECE", "score")}


def report_figures(model: PairModel, results: Mapping[str, Mapping[str, object]]
                   ) -> list[Ratio]:
    """The report as ledger figures: "<set>: <score>" against the sources it was fitted on,
    and "coefficient: <feature>" of the model fitted on every source."""
    figures = [Ratio(f"{name}: {label}", float(r[key]), "fitted on " + "+".join(r["fitted_on"]),
                     unit=unit)
               for name, r in results.items() for key, (label, unit) in SCORES.items()]
    return figures + [Ratio(f"coefficient: {feature}", coef, "standardised feature",
                            unit="coef") for feature, coef in zip(FEATURES, model.coef)]


def main(argv: Sequence[str] | None = None) -> None:
    started = machine()
    model, results = fit_and_report()
    print(format_report(results))
    path = record("verifier_report", report_figures(model, results), {"seed": SEED},
                  started=started)
    print(f"recorded {path}")


if __name__ == "__main__":
    main()
