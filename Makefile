# The two commands: `make demo` and `make test`. Both do all set-up first.
# `make check` is the quick lane while working: lint, types and the tests not marked slow/browser.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTHON ?= $(shell command -v python3.11 || command -v python3)

export MINIWOB_CHROME_BINARY ?= /usr/bin/chromium
export MINIWOB_CHROMEDRIVER ?= /usr/bin/chromedriver

.PHONY: setup system demo test check lint types bench clean policy policy-table matrix

## system packages: Chromium + ChromeDriver (MiniWoB++), bubblewrap (shell sandbox),
## mmdebstrap (Debian root file systems for task environments built from Dockerfiles),
## and as root docker.io (--sandbox docker; the tests start its daemon when none answers)
system:
	@missing=""; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	[ -x /usr/bin/chromedriver ] || missing="$$missing chromium-driver"; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v mmdebstrap >/dev/null || missing="$$missing mmdebstrap"; \
	[ "$$(id -u)" != 0 ] || command -v dockerd >/dev/null || missing="$$missing docker.io"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing system packages:$$missing — run: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch==2.13.0 is pinned first: it is the CPU wheel; an unpinned torch pulls a CUDA build
	$(PY) -m pip install -q 'torch==2.13.0'
	$(PY) -m pip install -q -e '.[web,dev,train,delegation,robot]'
	touch $(STAMP)

setup: system $(STAMP)
	@# three.js for the robot suite's browser view, from npm into ~/.cache/tackroom/npm (once)
	@if command -v npm >/dev/null; then $(PY) -m tackroom.suites.robot.web.assets >/dev/null; \
	else echo "npm not found: the robot suite's 3D view needs it (apt-get install nodejs npm)"; fi

## the main job on embedded defaults: the bundled policy and the experts across the shipped
## MiniWoB++ harnesses, then the ceiling/mismatch table and the HTML report
DEMO_TASKS := click-test,click-test-2,click-test-transfer,click-button,click-button-sequence,click-dialog,click-dialog-2,click-link,click-widget,focus-text,focus-text-2,identify-shape
demo: setup
	$(VENV)/bin/tackroom eval --suite miniwob --tasks $(DEMO_TASKS) \
	  --harness som-tools,html-commands,outline-coords --policy bundled,expert --seeds 0-1 --max-tokens 48
	$(VENV)/bin/tackroom report latest

## the bundled policy, reproducibly: expert episodes under som-tools (seeds 1000-1149, never
## evaluated on) -> a fresh `model init` -> `tackroom sft` -> installed into the package
POLICY_DIR := build/policy
policy: setup
	rm -rf $(POLICY_DIR)
	$(VENV)/bin/tackroom eval --suite miniwob --tasks $(DEMO_TASKS) --harness som-tools \
	  --policy expert --seeds 1000-1149 --db $(POLICY_DIR)/records.duckdb
	$(VENV)/bin/tackroom model init $(POLICY_DIR)/init --size small --seed 0
	$(VENV)/bin/tackroom sft $(POLICY_DIR)/init --out $(POLICY_DIR)/sft \
	  --db $(POLICY_DIR)/records.duckdb --harness som-tools --epochs 2 --batch-size 16 --threads 1 \
	  --lr 2e-3 --warmup 20 --checkpoint-every 50 --save-dtype float16
	$(PY) -m tackroom.policies.bundled install $(POLICY_DIR)/sft/final
	$(MAKE) policy-table

## the bundled policy's success per task under its own harness and the others (docs/models.md)
policy-table: setup
	$(VENV)/bin/tackroom eval --suite miniwob --tasks $(DEMO_TASKS) \
	  --harness som-tools,html-commands,outline-coords --policy bundled --seeds 0-9 --max-tokens 64 \
	  --db $(POLICY_DIR)/eval.duckdb

## pytest-xdist: one worker per core; a test file stays on one worker, so its module-scoped
## fixtures (a browser, a trained model) are made once. WORKERS=1 runs in one process.
WORKERS ?= auto
PYTEST_PARALLEL := $(if $(filter 1,$(WORKERS)),-p no:xdist,-n $(WORKERS) --dist loadfile)

lint: setup
	$(VENV)/bin/ruff check tackroom tests bench examples

## mypy over tackroom/ (settings in pyproject.toml's [tool.mypy])
types: setup
	$(PY) -m mypy

## the whole test suite, in parallel (lint and types first); docs/testing.md has the lanes
test: lint types
	$(PY) -m pytest $(PYTEST_PARALLEL) --durations=25

## the quick lane: lint, types, and every test not marked slow or browser (<= 3 min)
check: lint types
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not slow and not browser"

## every agent CLI on every public Terminal-Bench/Harbor task, under bubblewrap and Docker
## (tests/test_agent_layers.py; ~8–13 min on 2 cores; `make test` runs a cover of it)
matrix: setup
	$(PY) -m pytest -p no:xdist -m matrix -s tests/test_agent_layers.py

bench: setup
	$(PY) bench/overhead.py

clean:
	rm -rf $(VENV) tackroom-runs .pytest_cache .mypy_cache
