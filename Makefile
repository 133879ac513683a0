# One entry point per job. Each target creates/updates .venv first.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(VENV)/bin/pip
STAMP   = $(VENV)/.installed-stamp
ARGS   ?=

.PHONY: run test install bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PIP) install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

## One run with the defaults (simulator, Qwen2.5-32B on A100-80GB, FCFS); prints a JCT summary.
run: $(STAMP)
	$(PY) run.py $(ARGS)

## The default test suite.
test: $(STAMP)
	$(PY) -m pytest $(ARGS)

## Simulator speed benchmark (simulated seconds per wall second).
bench: $(STAMP)
	$(PY) -m topas.bench $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
