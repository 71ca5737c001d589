# gpu-platform developer entry points. Everything runs inside ./.venv, created on demand.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# System packages the system tests need (Debian names); `make deps` installs them as root.
SYSTEM_DEPS := hwloc-nox golang-etcd-server-dev iproute2 procps prometheus etcd-server chromium \
  docker.io docker-compose debootstrap
# A single-node Slurm beside us in `make bench` (tests/benchmarks/bench_slurm_peer.py).
SYSTEM_DEPS += slurmctld slurmd slurm-client munge

.PHONY: run test lint typecheck contracts unit bench chaos deps clean help proto openapi containers bench-smoke gpu-check

help:
	@echo "make run    - create .venv, install, start 'gpu-platform serve' (embedded single node)"
	@echo "make test   - create .venv, install .[dev], run ruff, mypy, import-linter, pytest"
	@echo "make lint   - ruff + mypy + import-linter only"
	@echo "make bench  - run every benchmark; writes bench/results.json, bench/REPORT.md, a table"
	@echo "              (make bench QUICK=1: smaller sizes, a few minutes)"
	@echo "make chaos  - leader kills, SIGSTOPs and partitions on real clusters in network"
	@echo "              namespaces (root), histories checked; writes bench/chaos.json and"
	@echo "              bench/chaos/*.json (CHAOS_ARGS=--long: over 1,000 faults, hours)"
	@echo "make containers - image jobs, the Dockerfile and the compose cluster on a real Docker"
	@echo "              daemon (started here when none runs; root); minutes the first time"
	@echo "make deps   - install the system packages the system tests need (root, apt-get)"
	@echo "make proto  - regenerate the gRPC Python modules from the .proto file"
	@echo "make openapi - rewrite docs/openapi.json from the code (a test checks they agree)"

$(VENV)/bin/activate:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed: $(VENV)/bin/activate pyproject.toml
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/bin/activate pyproject.toml
	$(PIP) install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(VENV)/bin/gpu-platform serve

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Two workers, one test file at a time each (--dist loadfile keeps a file's module fixtures
# in one process). PYTEST_WORKERS=0 runs the suite in this process.
PYTEST_WORKERS ?= 2

test: lint
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=30 --ignore=tests/containers --ignore=tests/gpu --ignore=tests/bench_smoke

# Not part of `make test` (every benchmark at its smallest: ~3 minutes alone); .ci/run runs it.
bench-smoke: $(VENV)/.installed-dev
	$(VENV)/bin/pytest -q tests/bench_smoke

# Not part of `make test` (minutes the first time: debootstrap, image build); .ci/run runs it.
containers: $(VENV)/.installed-dev
	$(VENV)/bin/pytest -q tests/containers

# Not part of `make test` or CI: needs an NVIDIA GPU, its driver and PyTorch (docs/gpu-check.md).
gpu-check: $(VENV)/.installed-dev
	$(VENV)/bin/pytest -q -rA -o timeout=600 tests/gpu

unit: $(VENV)/.installed-dev
	$(VENV)/bin/pytest -q tests/unit tests/property

bench: $(VENV)/.installed-dev
	$(PY) tests/benchmarks/run_all.py --out bench/results.json $(if $(QUICK),--quick)

# Not part of `make test`: needs root (network namespaces) and takes minutes.
chaos: $(VENV)/.installed-dev
	$(PY) tests/chaos/run_chaos.py --out bench/chaos.json $(CHAOS_ARGS)

PROTO := src/gpu_platform/adapters/inbound/grpc/v1/gpu_platform.proto \
  src/gpu_platform/adapters/outbound/raft_grpc/v1/raft.proto \
  src/gpu_platform/adapters/agent_wire/v1/agent.proto
proto: $(VENV)/.installed-dev
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m grpc_tools.protoc -Isrc --python_out=src \
	  --grpc_python_out=src --mypy_out=src $(PROTO)

openapi: $(VENV)/.installed
	$(PY) -m gpu_platform.infrastructure.openapi docs/openapi.json

deps:
	@if [ "$$(id -u)" != 0 ]; then echo "make deps: run as root (apt-get install -y $(SYSTEM_DEPS))"; exit 1; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_DEPS)

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache bench/results.json bench/chaos.json bench/chaos
