# mmcache workbench. `make figures` and `make test` do all set-up themselves.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Pinned in every pip call: an unpinned open_clip_torch resolves to other torch builds.
TORCH_PINS := torch==2.14.1 torchvision==0.29.1
# fiu-utils: libfiu, whose POSIX preload fails the disk I/O of tests/tiers/test_disk_faults.py.
# gcc: builds the LD_PRELOAD shim that traces the SQLite writes of tests/tiers/test_power_loss.py.
# chromium + chromium-driver: the browser in which tests/lab/test_figures_report.py opens
# figures/index.html and tests/lab/test_jupyterlab.py runs notebook 00 in JupyterLab.
APT_PACKAGES := espeak-ng dataset-fashion-mnist asterisk-core-sounds-en-wav \
                asterisk-core-sounds-en pocketsphinx-testdata redis-server sox wordnet-base \
                chromium chromium-driver fiu-utils gcc
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
# Two pytest workers (pytest-xdist), each test file on one of them (a notebook's smoke run is a
# module fixture): tests that wait on subprocesses, servers and browsers overlap, 12.5 against
# 16 minutes serial on 2 cores. More workers than cores only contend.
PYTEST_ARGS ?= -n 2 --dist loadfile
comma := ,

# pip leaves the ~5 GB it installs uncompiled (byte-compiling it all took 70 s of set-up on one
# core); Python compiles and caches the modules a run imports instead, so this must not be off.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help setup setup-bench sysdeps test smoke figures check-docs check-readme docs models priors verifier lab pair bench bench-cache bench-cache-20k bench-async bench-replay bench-cachebench bench-guard bench-dashboard bench-encoders bench-thresholds bench-threads bench-faults bench-soak latency-profile clean

help:
	@echo "make figures   regenerate every figure (full notebooks) into figures/, with index.html and MANIFEST.md"
	@echo "make check-docs  compare the numbers of README.md and docs/ with the runs make figures wrote"
	@echo "make docs      build the docs site into site/ (mkdocs --strict)"
	@echo "make test      unit, property and notebook smoke tests"
	@echo "make smoke     run every notebook with SMOKE=True into runs/<name>-smoke/"
	@echo "make models    train/cache the offline CLIP (data/models/)"
	@echo "make priors    refit mmcache/resources/threshold_priors.json (error-budget prior, calibration)"
	@echo "make verifier  refit mmcache/resources/pair_verifier.json (the learned pair verifier) and report it"
	@echo "make bench     performance benchmarks (ratios against baselines run side by side), then one table of them all"
	@echo "make latency-profile  re-measure mmcache/resources/latency_profile.json (CacheBench-MM's latencies)"
	@echo "make lab       open JupyterLab on notebooks/ (the venv's kernel, offline)"
	@echo "make pair      regenerate notebooks/*.ipynb (no outputs) from their .py sources"

# The venv and the Debian packages install side by side.
setup:
	@$(MAKE) --no-print-directory -j2 sysdeps $(STAMP)

# The same with the bench extra (GPTCache, for notebook 02 and the cache bench) in one pip call.
setup-bench:
	@$(MAKE) --no-print-directory -j2 sysdeps $(BENCH_STAMP)

# venv_install EXTRAS: the venv with the package and these extras (torch pinned).
define venv_install
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet --no-compile $(TORCH_PINS) -e '.[$(1)]'
endef

$(STAMP): pyproject.toml
	$(call venv_install,test)
	touch $@

$(BENCH_STAMP): pyproject.toml
	$(call venv_install,test$(comma)bench)
	touch $(STAMP) $@

# Debian packages: data sets, speech, redis-server, chromium. Installed when root, else the command
# is printed.
sysdeps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo -n "$$p "; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "apt-get install $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "mmcache needs Debian packages; run: sudo apt-get install -y $$missing"; exit 1; \
	  fi; \
	fi

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

smoke: setup
	$(PY) -m mmcache.lab.runbook --smoke

models: setup
	$(PY) -m mmcache.lab.clip_training

# Every notebook in full mode through the sweep runner (two at a time on 2 cores), then the report:
# figures/index.html (every figure with its caption and provenance) and figures/MANIFEST.md.
# The offline CLIP (`make models`) is trained by the runner, beside the first notebooks.
# The bench extra brings GPTCache, which notebook 02 runs side by side with mmcache's rules.
figures: setup-bench
	$(PY) -m mmcache.lab.figures

# Every number README.md and docs/ print, against the runs of `make figures` (figures/expected.yaml).
check-docs: setup
	$(PY) -m mmcache.lab.docs_check

check-readme: check-docs

# The docs site (mkdocs.yml): no warnings, no broken links; the configuration reference is
# generated from the schema. `make test` runs the same build (tests/test_docs_build.py).
docs: setup
	$(PY) -m mkdocs build --strict --site-dir site

# The shipped threshold priors / calibration curves, fitted on labelled pairs (training split).
priors: setup
	$(PY) -m mmcache.studies.priors

# The learned pair verifier (thresholds.verifier: pairs), fitted on every source's training split;
# prints its leave-one-source-out report.
verifier: setup
	$(PY) -m mmcache.studies.pair_verifier

# JupyterLab on notebooks/ as tests/lab/test_jupyterlab.py starts it (mmcache/lab/jupyterlab.py):
# offline and quiet, its python3 kernel the venv's interpreter.
lab: setup
	$(PY) -m mmcache.lab.jupyterlab

# The .py sources are what we review; the paired .ipynb carry no outputs (nbstripout's form).
pair: setup
	$(VENV)/bin/jupytext --to ipynb --update notebooks/[0-9][0-9]_*.py
	$(VENV)/bin/nbstripout notebooks/[0-9][0-9]_*.ipynb

# Every benchmark, then one table of every ratio they recorded beside its target, then the
# numbers of docs/results/benchmarks.md and docs/design/coherence.md against those records.
bench: setup-bench
	rm -rf runs/bench
	$(MAKE) bench-cache bench-cache-20k bench-threads bench-replay bench-async bench-cachebench \
	        bench-guard bench-dashboard bench-encoders bench-thresholds bench-faults bench-soak \
	        bench-verifier
	$(PY) -m mmcache.lab.bench.ledger
	$(PY) -m mmcache.lab.docs_check --bench

# CacheBench-MM's measured latencies (encoders, cache tiers) on this machine; committed.
latency-profile: setup
	$(PY) -m mmcache.lab.bench.latency_profile

bench-cache: setup-bench
	$(PY) -m mmcache.lab.bench.tiered_cache

bench-cache-20k: setup-bench
	$(PY) -m mmcache.lab.bench.tiered_cache --n 20000 --fill-gets 1000

# L2 lookups/s of 1, 2 and 4 threads sharing one cache (target: 2 threads >= 1.6x one).
bench-threads: setup-bench
	$(PY) -m mmcache.lab.bench.tiered_cache --n 20000 --threads-only --threads 1,2,4 --queries 4000

bench-async: setup
	$(PY) -m mmcache.lab.bench.async_twins

bench-replay: setup-bench
	$(PY) -m mmcache.lab.bench.eviction_replay

bench-cachebench: setup
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(PY) -m mmcache.lab.bench.cachebench_engine

bench-guard: setup
	$(PY) -m mmcache.lab.bench.guard

# A get loop with cache.dashboard() listening ÷ without it (target: at most 1.05).
bench-dashboard: setup
	$(PY) -m mmcache.lab.bench.dashboard

bench-encoders: setup
	$(PY) -m mmcache.lab.bench.encoders

bench-thresholds: setup
	$(PY) -m mmcache.lab.bench.thresholds

# The learned pair verifier's leave-one-source-out report (make verifier refits the shipped model).
bench-verifier: setup
	$(PY) -m mmcache.lab.bench.verifier_report

# The store fault matrix on private redis-servers (about 20 s).
bench-faults: setup
	$(PY) -m mmcache.lab.bench.faults

# The long soak: 10^6 operations with churn and TTLs over a shared SQLite L3 (about 12 min).
bench-soak: setup
	$(PY) -m mmcache.lab.bench.soak

clean:
	rm -rf runs site figures/*.png figures/*.pdf figures/*.json figures/MANIFEST.md \
	       figures/index.html .pytest_cache
