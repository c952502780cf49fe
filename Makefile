# DePIN Mesh: `make demo` runs a local grid end to end; `make test` runs the suite.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(CURDIR)/node_modules/.bin:$(PATH)
export SOLCX_BINARY_PATH := $(CURDIR)/.solcx
export MESH_TEST_POSTGRES_URL ?= postgresql+psycopg://postgres@127.0.0.1:5432/test
# ape's foundry provider would otherwise start (or silently reuse) an anvil on port 8545.
export APE_FOUNDRY_HOST ?= auto

.PHONY: setup compile test test-contracts test-invariants slither test-python lint demo fuzz

setup:
	@tools/setup.sh

compile: setup
	@ape compile

FORGE_FLAGS := --offline --use $(SOLCX_BINARY_PATH)/solc-v0.8.28

test: setup compile lint test-contracts test-invariants slither test-python

test-contracts:
	ape test tests/contracts -p no:cacheprovider

# The review's attacks and the contracts' rules as Foundry invariants: 20 runs x 500 steps
# (10,000) over every external function with time travel (foundry.toml).
test-invariants:
	forge test $(FORGE_FLAGS)

# Static analysis: forge's build info, then slither in its own venv (tools/setup.sh); fails on
# any high or medium finding not triaged in contracts/slither-triage.md (slither.config.json).
slither:
	rm -rf .forge/out/build-info
	forge build $(FORGE_FLAGS) --build-info --force --skip 'tests/**'
	PATH=$(CURDIR)/.venv-slither/bin:$$PATH slither . --ignore-compile --config-file slither.config.json

test-python:
	pytest --ignore=tests/contracts -p no:cacheprovider -p no:ape_test

lint:
	ruff check orchestrator agent tests
	mypy

demo: setup compile
	mesh demo

# Long runs, kept out of `make test`: the invariant suite at 100 runs x 1,000 steps (100,000).
fuzz: setup
	FOUNDRY_PROFILE=fuzz forge test $(FORGE_FLAGS) --match-contract Invariants
