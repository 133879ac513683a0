# One entry point per job. Each target creates/updates .venv first.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(VENV)/bin/pip
STAMP   = $(VENV)/.installed-stamp
ARGS   ?=

.PHONY: run test install bench clean reproduce reproduce-quick reproduce-full reproduce-real tune capacity

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

## The default test suite, including the real SGLang server on CPU (installed by sglang-cpu, which
## keeps a GPU sglang install (`make sglang-gpu`, detected by its sglang-kernel) as it is;
## SKIP_SGLANG_CPU=1 skips that step altogether). The tests run in a random order (pytest-randomly, a dev extra: the seed is
## printed first; ARGS="--randomly-seed=N" repeats an order, ARGS="-p no:randomly" keeps file order), so a test
## that passes only after another fails loudly. Two pytest runs: every test outside tests/sglang spread over
## TEST_WORKERS processes (pytest-xdist; a test file per process, so its shared fixtures are built once; 0: one
## process), then the real-server tests (tests/sglang) in one process, since two CPU servers at once made them fail
## (docs/decisions/0052). ARGS are pytest options for both runs (-x, -k, --randomly-seed=N); a run they leave without
## a test passes. For a few files, run .venv/bin/pytest on them.
TEST_WORKERS ?= auto
TEST_ENV = $(if $(SKIP_SGLANG_CPU),,TOPAS_REQUIRE_SGLANG=1)
test: $(STAMP) $(if $(SKIP_SGLANG_CPU),,sglang-cpu)
	$(PY) -m ruff check .
	$(TEST_ENV) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --ignore=tests/sglang $(ARGS) || [ $$? -eq 5 ]
	$(TEST_ENV) $(PY) -m pytest tests/sglang $(ARGS) || [ $$? -eq 5 ]

## Simulator speed benchmark (simulated seconds per wall second).
bench: $(STAMP)
	$(PY) -m topas.bench $(ARGS)

BACKEND ?= sim
## The paper's tables and figures on the reduced grid (< 30 min on 2 cores) -> analysis/results/.
reproduce: $(STAMP)
	$(PY) -m topas.reproduce --grid default --backend $(BACKEND) $(ARGS)

## Smoke test of the whole pipeline (< 5 min) -> analysis/results/quick/. BACKEND=sglang: the real
## server (without a GPU: the tiny CPU model, ~5 min here) -> analysis/results/sglang/quick/.
reproduce-quick: $(STAMP) $(if $(filter sglang,$(BACKEND)),sglang-cpu)
	$(PY) -m topas.reproduce --grid quick --backend $(BACKEND) $(ARGS)

## The real-engine grid (5 workloads x the paper's 6 schedulers, 20 tasks, 1 seed) on every visible GPU;
## ARGS="--dry-run" prints the plan and its estimated hours first. GPU machine: `make sglang-gpu` first.
reproduce-real: $(STAMP)
	$(PY) -m topas.reproduce --grid real --backend sglang $(ARGS)

## The experiment configs' full grids (10 seeds, 200 tasks): a bigger machine or a cluster.
reproduce-full: $(STAMP)
	$(PY) -m topas.reproduce --grid full --backend $(BACKEND) $(ARGS)

## Hyper-parameter tuning under the rules of docs/protocol.md -> analysis/results/tuning/.
tune: $(STAMP)
	$(PY) -m topas.tuning $(ARGS)

## Measure each workload's capacity (FCFS, all tasks at t=0) -> topas/workloads/data/capacity.yaml.
capacity: $(STAMP)
	$(PY) -m topas.measure_capacity $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache

## Real SGLang 0.5.23 server on CPU (no GPU): CPU torch 2.13.0, sglang --no-deps, stand-ins. Idempotent.
.PHONY: sglang-cpu test-sglang
sglang-cpu: $(STAMP)
	bash scripts/install_sglang_cpu.sh $(VENV)

## The SGLang tests (adapter unit tests + end-to-end against a real CPU server); never skipped here.
test-sglang: sglang-cpu
	TOPAS_REQUIRE_SGLANG=1 $(PY) -m pytest tests/sglang $(ARGS)

.PHONY: fidelity fidelity-memory
## Simulator fidelity: the real SGLang server (CPU, tiny model) vs the simulator on identical
## traces, FCFS/LPM/TOPAS x dag4 + scaled MetaGPT-TL, 3 repeats -> analysis/results/fidelity/.
fidelity: sglang-cpu
	$(PY) -m topas.fidelity $(ARGS)

## Where the verdict lives, on the real CPU server (~30 min): the memory-bound MetaGPT-TL cell (prefixes ~89% of a
## 2,240-token pool, 24 tasks at 2 task/s), LPM / Parrot-FCFS / TOPAS x 6 repeats -> analysis/results/fidelity/tl_memory/;
## and a cell where the simulator shows a tie: DAG-4 (the make fidelity preset), FCFS / Parrot-FCFS / TOPAS x 8
## repeats -> analysis/results/fidelity/dag4_tie/.
fidelity-memory: sglang-cpu
	$(PY) -m topas.fidelity --workloads metagpt_tl --schedulers lpm,parrot_fcfs,topas --repeats 6 --num-tasks 24 \
		--rate-scale 2 --max-total-tokens 2240 --profile analysis/results/fidelity/profile.json \
		--runs runs/fidelity_tl_memory --out analysis/results/fidelity/tl_memory $(ARGS)
	$(PY) -m topas.fidelity --workloads dag4 --schedulers fcfs,parrot_fcfs,topas --repeats 8 \
		--profile analysis/results/fidelity/profile.json --runs runs/fidelity_dag4_tie \
		--out analysis/results/fidelity/dag4_tie $(ARGS)

.PHONY: regenerate
## Every committed result after a change to the code runs execute (hours on 2 cores; resumable): the fidelity
## measurements first (the reports read their status), then the reduced and the full grid (cached runs are kept:
## after a TOPAS change only TOPAS's runs are made again), then the provenance of both, which fails if any table
## is still another code's. On a shared machine run it alone: the fidelity runs time a real server.
regenerate: sglang-cpu
	$(MAKE) fidelity fidelity-memory
	$(PY) -m topas.reproduce --grid default
	$(PY) -m topas.reproduce --grid full
	$(PY) -m analysis.provenance analysis/results analysis/results/full

.PHONY: sglang-gpu gpu-check
## Real SGLang 0.5.23 on a GPU machine (sglang's own CUDA torch; no stand-ins).
sglang-gpu: $(STAMP)
	$(PIP) install --quiet -e ".[sglang]"

## GPU check: a short real SGLang run vs the simulator on the same trace (one GPU, < 10 min).
gpu-check: $(STAMP)
	PYTHON=$(PY) bash scripts/gpu_check.sh $(ARGS)
