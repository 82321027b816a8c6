"""The command line: ``python -m mmcache.sweep SPEC --engine local|ray [--address A] --out DIR``."""

from __future__ import annotations

import argparse
import sys

from mmcache.errors import ConfigError
from mmcache.lab.sweep.engines import ENGINES
from mmcache.lab.sweep.runner import run_sweep
from mmcache.lab.sweep.spec import load_spec

#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; exit 0 when every point succeeded, 1 when some failed, 2 on a bad spec."""
    parser = argparse.ArgumentParser(
        prog="python -m mmcache.sweep",
        description="Run a declared sweep; re-running skips the points already done.")
    parser.add_argument("spec", help="the sweep spec (YAML)")
    parser.add_argument("--engine", choices=ENGINES, default="local",
                        help="local: a process pool on this machine; ray: a Ray cluster")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address (default: start a local Ray instance)")
    parser.add_argument("--out", required=True, help="the sweep folder (created if missing)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        report = run_sweep(spec, args.out, engine=args.engine, address=args.address,
                           progress=False if args.no_progress else None)
    except ConfigError as err:
        print(f"[sweep] {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"[sweep] interrupted; finished points are kept in {args.out}, "
              "run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"[sweep] {spec.name}: {len(spec.points)} points, {report.skipped} already done, "
          f"{report.ran} run, {report.failed} failed -> {args.out}/results.csv")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
