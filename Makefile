# LakeSync developer commands. `make help` lists them.
# Everything installs itself: a bootstrap venv with uv (.tools), the project venv (.venv) from uv.lock,
# and the system packages the Spark jobs need (Java) when they are missing.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
UV_VERSION := 0.13.9
VENV := .venv
UV := .tools/bin/uv
export UV_PROJECT_ENVIRONMENT := $(abspath $(VENV))
export UV_PYTHON_DOWNLOADS := never
export UV_LINK_MODE := copy
RUN := $(UV) run --frozen --no-sync

# CDK: the environment to synthesize or deploy, and the pinned CLI (the `latest` 3.x CLI does not work with this app).
ENV ?= dev
CDK_VERSION := 2.1148.1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true
CDK := cd infra && PATH="$(abspath $(VENV))/bin:$$PATH" npx --yes aws-cdk@$(CDK_VERSION)
CDK_CTX := -c lakesync:environments=$(ENV)

.PHONY: help setup sysdeps demo test lint typecheck unit proto bench bench-lake bench-materialise bench-cost bench-durability bench-realtime fmt clean synth bootstrap diff deploy destroy test-infra bench-client bench-connectors

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"

$(VENV)/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --all-extras --all-groups --python $(PYTHON)
	@touch $@

setup: $(VENV)/.synced sysdeps ## create .venv and install everything (idempotent)

sysdeps: ## install missing system packages (Java for Spark)
	@bash scripts/sysdeps.sh

demo: setup ## run the main job: the local demo
	$(RUN) lakesync demo

test: setup ## lint, type-check and run the whole test suite
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy
	$(RUN) pytest -n auto --maxprocesses 4 --dist loadscope

unit: $(VENV)/.synced ## run only the fast pure tests
	$(RUN) pytest tests/unit -q

lint: $(VENV)/.synced ## ruff lint + format check
	$(RUN) ruff check .
	$(RUN) ruff format --check .

fmt: $(VENV)/.synced ## apply ruff fixes and formatting
	$(RUN) ruff check --fix .
	$(RUN) ruff format .

typecheck: $(VENV)/.synced ## mypy strict on src/ and functions/
	$(RUN) mypy

proto: $(VENV)/.synced ## regenerate the protobuf code from proto/
	$(RUN) python scripts/gen_proto.py

bench: setup ## run the gateway benchmarks (push, pull, imports, real-time freshness); results go to benchmarks/results/{latest,realtime}.*
	$(RUN) python -m benchmarks
	$(RUN) python -m benchmarks.realtime

bench-lake: setup ## run the lake benchmarks (Spark + Iceberg, ~15 min); results go to benchmarks/results/lake.*
	$(RUN) python -m benchmarks --only lake

.PHONY: bench-flush
bench-flush: setup ## the flush function (the default engine) end to end vs a raw Query + one pyiceberg append of the same rows (~5 min); results in benchmarks/results/flush.*
	$(RUN) python -m benchmarks.flush

bench-materialise: setup ## materialise 100k deltas into a throwaway PostgreSQL, then local freshness push -> row (~3 min); results in benchmarks/results/{materialise,freshness}.*
	$(RUN) python -m benchmarks.materialise
	$(RUN) python -m benchmarks.freshness

bench-cost: setup ## what workloads cost on AWS (requests counted, handlers timed, Glue jobs on local Spark, idle month from the synth; the flush engines on both sides of the tick's switch; ~20 min); results in benchmarks/results/cost.*, cost-flush-engines.*
	$(RUN) python -m benchmarks.cost
	$(RUN) python -m benchmarks.cost.flush_engines

bench-realtime: setup ## local freshness push -> other clients' sockets (listeners in their own processes), 1, 25 and 100 listeners (~3 min); results in benchmarks/results/realtime.*
	$(RUN) python -m benchmarks.realtime

.PHONY: bench-streams
bench-streams: setup ## scope changes as differences on moto: a subscription's backfill from the log and from a checkpoint, membership changes, a rules change for 1,000 clients vs re-bootstrapping them (~3-4 min); results in benchmarks/results/streams.*
	$(RUN) python -m benchmarks.streams

.PHONY: bench-recovery
bench-recovery: setup ## recovery from the lake: restore 1,000,000 rows (1.2M deltas) from a pyiceberg delta log into an empty buffer on moto, by phase; explain one row on local Spark, cold and warm (~15 min; BENCH_RECOVERY_ROWS=20000 for a ~1 min check into a temp dir); results in benchmarks/results/recovery.*
	$(RUN) python -m benchmarks.recovery

bench-durability: setup ## the embedded default's journal cost per push and concurrent serving; results in benchmarks/results/durability.*
	$(RUN) python -m benchmarks.durability

.PHONY: bench-plots
bench-plots: $(VENV)/.synced ## draw every benchmarks/results/*.png again from its committed *.json (no benchmark runs; STEMS="lake client" for some)
	$(RUN) python -m benchmarks.plots $(STEMS)

synth: $(VENV)/.synced ## write ENV's CloudFormation template to infra/cdk.out (offline; ENV=dev by default)
	$(RUN) python infra/app.py $(CDK_CTX)

bootstrap: $(VENV)/.synced ## one-time CDK bootstrap of your AWS account/region (needs credentials)
	$(CDK) bootstrap --no-notices

diff: $(VENV)/.synced ## what `make deploy ENV=...` would change
	$(CDK) diff --no-notices $(CDK_CTX) LakeSync-$(ENV)

deploy: $(VENV)/.synced ## deploy environment ENV (default dev) with your AWS credentials (docs/deployment.md)
	$(CDK) deploy --no-notices --require-approval broadening $(CDK_CTX) LakeSync-$(ENV)

destroy: $(VENV)/.synced ## delete ENV's stack (data with removalPolicy retain stays)
	$(CDK) destroy --no-notices $(CDK_CTX) LakeSync-$(ENV)

test-infra: $(VENV)/.synced ## only the CDK tests (synth, cdk-nag, cfn-lint, least privilege)
	$(RUN) pytest tests/infra -q

clean: ## remove the venvs and caches
	rm -rf .tools $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

bench-connectors: setup ## the database connector: diff poll of a 100k-row table and cursor poll of 10k changes vs raw SELECT on a throwaway PostgreSQL (~1 min); results in benchmarks/results/connectors.*
	$(RUN) python -m benchmarks.connectors

bench-client: setup ## the local-first client SDK: initial sync of 100k rows from a checkpoint vs replay through pull, insert_many vs raw sqlite3 (~1 min); results in benchmarks/results/client.*
	$(RUN) python -m benchmarks.client
