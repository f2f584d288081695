# The two commands: `make demo` and `make test`. Both do all set-up first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTHON ?= $(shell command -v python3.11 || command -v python3)

export MINIWOB_CHROME_BINARY ?= /usr/bin/chromium
export MINIWOB_CHROMEDRIVER ?= /usr/bin/chromedriver

.PHONY: setup system demo test lint bench clean

## system packages: Chromium + ChromeDriver (MiniWoB++) and bubblewrap (shell sandbox)
system:
	@missing=""; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	[ -x /usr/bin/chromedriver ] || missing="$$missing chromium-driver"; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
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
	$(PY) -m pip install -q -e '.[web,dev,train]'
	touch $(STAMP)

setup: system $(STAMP)

## the main job on embedded defaults: experts across the shipped harnesses on MiniWoB++,
## then the ceiling/mismatch table and the HTML report
demo: setup
	$(VENV)/bin/tackroom eval --suite miniwob --harness som-tools,html-commands,outline-coords \
	  --policy expert --seeds 0-4
	$(VENV)/bin/tackroom report latest

## the whole test suite (lint first)
test: setup
	$(VENV)/bin/ruff check tackroom tests bench
	$(PY) -m pytest

bench: setup
	$(PY) bench/overhead.py

clean:
	rm -rf $(VENV) tackroom-runs .pytest_cache
