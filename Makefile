# DePIN Mesh: `make demo` runs a local grid end to end; `make test` runs the suite.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(CURDIR)/node_modules/.bin:$(PATH)
export SOLCX_BINARY_PATH := $(CURDIR)/.solcx
export MESH_TEST_POSTGRES_URL ?= postgresql+psycopg://postgres@127.0.0.1:5432/test
# ape's foundry provider would otherwise start (or silently reuse) an anvil on port 8545.
export APE_FOUNDRY_HOST ?= auto
# The CI sample's pooled floor, `make mutate`'s 90 %: the sample measured 115 of 117 killed
# (98.3 %, docs/mutation.md).
MUTATION_SAMPLE_THRESHOLD ?= 0.90

.PHONY: setup compile test test-contracts test-invariants slither test-python lint demo fuzz chaos scaleout mutate mutate-sample

setup:
	@tools/setup.sh

compile: setup
	@ape compile

# ape's dependency cache (contracts/.cache, every OpenZeppelin file) sits under forge's src: left
# in, a fresh clone's first build sends ~200 files to solc-js at once, which runs out of memory.
FORGE_FLAGS := --offline --use $(SOLCX_BINARY_PATH)/solc-v0.8.28 --skip 'contracts/.cache/**'

# `make test` set-up also brings chromium, for the dashboard's browser test (tools/setup.sh).
test: export SETUP_TEST := 1
test: setup compile lint test-contracts test-invariants slither test-python mutate-sample

test-contracts:
	ape test tests/contracts -p no:cacheprovider

# The review's attacks and the contracts' rules as Foundry invariants: 20 runs x 500 steps
# (10,000) over every external function with time travel (foundry.toml), on a fixed seed so a
# run is repeatable; `make fuzz` draws a new one each time.
test-invariants:
	forge test $(FORGE_FLAGS) --fuzz-seed 0x6d657368

# Static analysis: forge's build info, then slither in its own venv (tools/setup.sh); fails on
# any high or medium finding not triaged in contracts/slither-triage.md (slither.config.json).
slither:
	rm -rf .forge/out/build-info
	forge build $(FORGE_FLAGS) --build-info --force --skip 'tests/**'
	PATH=$(CURDIR)/.venv-slither/bin:$$PATH slither . --ignore-compile --config-file slither.config.json

# The 25 slowest tests are listed at the end, to keep `make test` within CI's budget.
test-python:
	pytest --ignore=tests/contracts -p no:cacheprovider -p no:ape_test --durations=25

# Mutation testing (tools/mutation.py, docs/mutation.md): every mutant of the domain, money
# and safety code, each module at least 90 % killed; report in .mesh/mutation/. The sample in
# `make test` runs the same 5 seeded mutants per module (each domain file one) every time.
mutate: setup compile
	python tools/mutation.py

mutate-sample: setup compile
	python tools/mutation.py --sample 5 --threshold $(MUTATION_SAMPLE_THRESHOLD)

lint:
	ruff check orchestrator agent protocol mesh tests tools scripts
	mypy

demo: setup compile
	mesh up --demo

# Long runs, kept out of `make test`: the contracts' invariant suite at 100 runs x 1,000 steps
# (100,000), then every Python property (the API fuzz tests included: the signed, stateful
# one prints its report) on Hypothesis's random "fuzz" profile with 20 times CI's examples
# (tests/conftest.py).
fuzz: setup compile
	FOUNDRY_PROFILE=fuzz forge test $(FORGE_FLAGS) --match-contract Invariants
	MESH_HYPOTHESIS_PROFILE=fuzz pytest tests/domain tests/api/test_api_fuzz.py tests/api/test_api_schemathesis.py tests/api/test_api_signed_fuzz.py -m "not postgres" -p no:cacheprovider -p no:ape_test

# The long fault run (the short one is tests/mesh/bench/test_chaos_bench.py): 200 orchestrator
# SIGKILLs with agent kills, RPC outages and slowdowns, agent partitions and chain reorgs,
# then the history checker; exits 1 on any violation. JSON report in .mesh/chaos.json.
# `make chaos CHAOS_ARGS=--postgres`: on a private PostgreSQL server, restarted as a fault too.
CHAOS_ARGS ?=
chaos: setup compile
	mkdir -p .mesh && mesh bench chaos --seed 1 --kills 200 --jobs 40 $(CHAOS_ARGS) --json > .mesh/chaos.json; \
	status=$$?; cat .mesh/chaos.json; exit $$status

# Two replicas on one PostgreSQL (MESH_TEST_POSTGRES_URL) under 10,000 placements, one killed
# half-way (the short one is tests/mesh/bench/test_scaleout_bench.py); exits 1 on any violation.
scaleout: setup compile
	mkdir -p .mesh && mesh bench scaleout --nodes 40 --jobs 20 --tasks-per-job 500 --json \
		> .mesh/scaleout.json; status=$$?; cat .mesh/scaleout.json; exit $$status
