"""Declared sweeps, the public path: ``python -m mmcache.sweep SPEC.yaml --engine local|ray
--out DIR`` runs :mod:`mmcache.lab.sweep`."""

from mmcache.lab.sweep import (Point, Resources, SweepReport, SweepSpec, load_spec, parse_spec,
                               run_sweep)

__all__ = ["Point", "Resources", "SweepReport", "SweepSpec", "load_spec", "parse_spec",
           "run_sweep"]

if __name__ == "__main__":
    import sys

    from mmcache.lab.sweep.__main__ import main

    sys.exit(main())
