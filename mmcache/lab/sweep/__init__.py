"""Declared parameter sweeps over notebooks and functions, local or on Ray, resumable.

A YAML spec (see :mod:`mmcache.lab.sweep.spec`) names a notebook or a ``module:function``
and its points; :func:`run_sweep` runs the points not yet done on a local process
pool or on Ray, writes ``DIR/<point>/`` (executed notebook or function outputs,
``metrics.json``, ``point.json``), the table ``DIR/results.csv`` and the spec's
figure. Command line::

    python -m mmcache.lab.sweep SPEC.yaml --engine local|ray [--address ADDR] --out DIR
"""

from __future__ import annotations

from mmcache.lab.sweep.runner import SweepReport, run_sweep
from mmcache.lab.sweep.spec import Point, Resources, SweepSpec, load_spec, parse_spec

__all__ = ["Point", "Resources", "SweepReport", "SweepSpec", "load_spec", "parse_spec",
           "run_sweep"]
