# Everyday commands. `make demo` runs the main job end to end; `make test` runs the tests.
PY      ?= python3
VENV    ?= .venv
BIN      = $(VENV)/bin
ARGUS    = $(BIN)/argus
EXTRAS  ?= dev,torch,hf,lightning,megatron

.PHONY: setup kafka-up kafka-down topics demo test test-slow test-all test-fast lint typecheck bench clean fuzz soak \
        lock deps-latest chaos

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

setup: $(BIN)/python ## create the venv, install argus-trace with extras (tested versions), fetch the Kafka jars
	$(BIN)/pip install -q -c constraints.txt -e ".[$(EXTRAS)]"
	$(ARGUS) kafka up
	$(ARGUS) topics create

kafka-up: ## start the local broker (idempotent)
	$(ARGUS) kafka up

kafka-down: ## stop the local broker
	$(ARGUS) kafka down

topics: kafka-up
	$(ARGUS) topics create

demo: setup ## the main job end to end: broker, workers, a faulty job, the live funnel
	$(ARGUS) demo

test: ## the normal suite: unit, property and integration tests against the real local broker (~10 min)
	$(ARGUS) kafka up
	$(BIN)/pytest -q -m "not slow and not chaos"

test-slow: ## the end-to-end and fault-injection runs marked slow (~15 min; CI runs them after `make test`)
	$(ARGUS) kafka up
	$(BIN)/pytest -q -m "slow and not chaos"

test-all: test test-slow ## both: what CI runs

test-fast: ## unit tests only (no broker)
	$(BIN)/pytest -q -m "not kafka and not slow"

lint: ## ruff + mypy
	$(BIN)/ruff check argus tests bench
	$(BIN)/ruff format --check argus tests bench
	$(BIN)/mypy

soak: kafka-up ## 30 min at a sustained load with a fault every 6 min (SOAK_RANKS, SOAK_MINUTES)
	$(BIN)/python bench/soak.py --ranks $${SOAK_RANKS:-1024} --minutes $${SOAK_MINUTES:-30}

chaos: kafka-up ## SIGKILL the funnel's worker at 20 random moments of a job: 0 alerts or verdicts lost or repeated (CHAOS_KILLS, CHAOS_SEED); live = in-memory engine in all five fault modes (docs/reliability.md)
	ARGUS_CHAOS_KILLS=$${CHAOS_KILLS:-20} ARGUS_CHAOS_SEED=$${CHAOS_SEED:-} $(BIN)/pytest -q -s --timeout=3600 tests/pipeline/test_funnel_chaos.py; \
	a=$$?; $(BIN)/pytest -q -s --timeout=3600 -m "chaos or not chaos" tests/pipeline/test_differential.py; \
	b=$$?; exit $$((a || b))

fuzz: ## hypothesis fuzzing of the codec and every agent input path, 10,000 cases per target
	ARGUS_FUZZ_EXAMPLES=$${ARGUS_FUZZ_EXAMPLES:-10000} $(BIN)/pytest -q --timeout=1800 tests/fuzz --hypothesis-show-statistics --durations=0

bench: ## every benchmark; results go to BENCHMARKS.md by hand
	for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lock: ## constraints.txt from the venv's installed versions (after the suite passed on them)
	$(BIN)/python .ci/lock.py write

LATEST ?= .venv-latest
deps-latest: ## the newest versions pyproject allows (no constraints) in $(LATEST), then the fast suite
	rm -rf $(LATEST)
	$(PY) -m venv $(LATEST)
	$(LATEST)/bin/pip install -q --upgrade pip
	$(LATEST)/bin/pip install -q -e ".[$(EXTRAS)]"
	@echo "== differences from constraints.txt (make lock in this venv pins them):"
	-$(LATEST)/bin/python .ci/lock.py check --installed
	@echo "== newer than pyproject allows (a bound to raise, after testing):"
	$(LATEST)/bin/pip list --outdated
	ARGUS_DEPS_LATEST=1 $(LATEST)/bin/pytest -q -m "not kafka and not slow"

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache build *.egg-info
