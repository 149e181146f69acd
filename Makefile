# Every target bootstraps .venv (Python 3.10, the pinned stack in constraints.txt)
# when it is missing or older than setup.py / constraints.txt.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Python 3.10 on PATH, else the newest 3.10 under pyenv. Each candidate is run, since a
# pyenv shim named python3.10 exists even when that version is not selected.
ifndef PYTHON310
PYTHON310 := $(shell for candidate in $$(command -v python3.10) $$(ls -d $$(pyenv root 2>/dev/null || echo $$HOME/.pyenv)/versions/3.10.*/bin/python3.10 2>/dev/null | sort -rV); do \
	if "$$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' >/dev/null 2>&1; then echo "$$candidate"; break; fi; done)
endif

# Real-data overrides, e.g. make pipeline-local DATA_DIR=~/Flickr8k GLOVE=~/glove.6B.zip
DATA_DIR ?=
GLOVE ?=
RESNET_WEIGHTS ?=
OUTPUT_DIR ?= outputs
# Extra config overrides: SET="trainer.epochs=5 trainer.per_replica_batch_size=64"
SET ?=
# VERBOSE=1: the full TFX / TensorFlow / Beam log on the console too (it is always in OUTPUT_DIR/logs/)
VERBOSE ?=
PYTEST_ARGS ?=
# extra arguments for benchmarks.run, e.g. make bench BENCH_ARGS="--only export"
BENCH_ARGS ?=
# pytest-xdist workers for make test / test-fast (tests/conftest.py groups the tests)
TEST_WORKERS ?= 2
# Kubeflow Pipelines / Vertex AI: make pipeline-vertex PROJECT=my-project REGION=us-central1 BUCKET=my-bucket DATA_DIR=gs://...
PROJECT ?=
REGION ?= us-central1
BUCKET ?=
IMAGE ?=

RUN_ARGS := --output_dir=$(OUTPUT_DIR) $(if $(DATA_DIR),--data_dir=$(DATA_DIR)) \
	$(if $(GLOVE),--glove=$(GLOVE)) $(if $(RESNET_WEIGHTS),--resnet_weights=$(RESNET_WEIGHTS)) \
	$(foreach assignment,$(SET),--set=$(assignment))

PIPELINE_LOCAL_ARGS := $(RUN_ARGS) $(if $(VERBOSE),--verbose)

KFP_ARGS := $(if $(PROJECT),--project=$(PROJECT)) --region=$(REGION) $(if $(BUCKET),--bucket=$(BUCKET)) \
	$(if $(IMAGE),--image=$(IMAGE)) $(if $(DATA_DIR),--data_dir=$(DATA_DIR),--no_data_fingerprint) \
	$(if $(GLOVE),--glove=$(GLOVE)) $(if $(RESNET_WEIGHTS),--resnet_weights=$(RESNET_WEIGHTS)) \
	$(foreach assignment,$(SET),--set=$(assignment))

.PHONY: help install check-java test test-fast lint bench demo-data pipeline-local pipeline-compile \
	pipeline-rehearse pipeline-vertex settings gpu-check clean

help:
	@echo "make pipeline-local   run the pipeline (demo data unless DATA_DIR=...)"
	@echo "make test             run the test suite (installs .venv first if needed)"
	@echo "make test-fast        the tests not marked slow or e2e (about a minute)"
	@echo "make demo-data        generate the demo dataset under OUTPUT_DIR/demo_data"
	@echo "make pipeline-compile write the Kubeflow Pipelines v2 / Vertex AI pipeline JSON"
	@echo "make pipeline-rehearse compile, then run the compiled Vertex pipeline here (TFX's task entrypoint)"
	@echo "make pipeline-vertex  compile and submit to Vertex AI (PROJECT=, REGION=, BUCKET=, DATA_DIR=)"
	@echo "make settings         every SET= key with its default, type and allowed values"
	@echo "make gpu-check        on a machine with GPUs: training and ResNet50 on them vs the CPU, one table"
	@echo "make install | lint | bench | clean"

$(STAMP): setup.py constraints.txt
	@test -n "$(PYTHON310)" || { echo "Python 3.10 not found on PATH or under pyenv (TFX 1.16 needs <3.11). Install it, e.g. 'pyenv install 3.10.13', or pass PYTHON310=/path/to/python3.10." >&2; exit 1; }
	@if [ -x $(PY) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))'; then echo "Recreating $(VENV): it is not Python 3.10"; rm -rf $(VENV); fi
	@test -x $(PY) || $(PYTHON310) -m venv $(VENV)
	# The lock is a complete, resolved environment: installed as-is, no resolver.
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r constraints.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@# joblib 1.6 asks for cloudpickle>=3 while Beam 2.59 needs 2.2.1; harmless here (see README "Stack").
	@$(PY) -m pip check | grep -v -e "joblib .* has requirement cloudpickle" -e "No broken requirements" | { ! grep . ; } || { echo "pip check found broken requirements (above)" >&2; exit 1; }
	@touch $(STAMP)

install: $(STAMP)

# pycocoevalcap's PTB tokenizer and METEOR (the evaluator and its tests) run Java.
check-java:
	@command -v java >/dev/null 2>&1 || { echo "A Java runtime is needed for the caption metrics (pycocoevalcap's PTB tokenizer and METEOR) and none is on PATH. Install one, e.g. 'sudo apt-get install default-jre-headless' (Debian/Ubuntu) or 'brew install openjdk' (macOS)." >&2; exit 1; }

# The CI command: every test, then the 15 slowest.
test: $(STAMP) check-java
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

# While developing: no slow or e2e tests (about a minute on 2 cores).
test-fast: $(STAMP) check-java
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -m "not slow and not e2e" --durations=5 $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check components pipeline tests benchmarks setup.py

bench: $(STAMP)
	$(PY) -m benchmarks.run --output_dir=$(OUTPUT_DIR)/bench $(BENCH_ARGS)

# One prepared run for a machine with GPUs (refuses without one); see benchmarks/gpu_check.py.
gpu-check: $(STAMP)
	$(PY) -m benchmarks.gpu_check --output_dir=$(OUTPUT_DIR)/gpu_check $(BENCH_ARGS)

settings: $(STAMP)
	@$(PY) -m pipeline.settings

demo-data: $(STAMP)
	$(PY) -m pipeline.local_runner demo-data $(RUN_ARGS)

pipeline-local: $(STAMP) check-java
	$(PY) -m pipeline.local_runner run $(PIPELINE_LOCAL_ARGS)

pipeline-compile: $(STAMP)
	$(PY) -m pipeline.kubeflow_v2_runner compile --output_dir=$(OUTPUT_DIR) $(KFP_ARGS)

# The compiled Vertex AI pipeline executed here, task by task, through TFX's container entrypoint.
pipeline-rehearse: $(STAMP) check-java
	$(PY) -m pipeline.rehearsal --output_dir=$(OUTPUT_DIR) $(foreach assignment,$(SET),--set=$(assignment))

pipeline-vertex: $(STAMP)
	@test -n "$(PROJECT)" -a -n "$(BUCKET)" -a -n "$(DATA_DIR)" || { echo "make pipeline-vertex needs PROJECT=, BUCKET= and DATA_DIR=gs://... (REGION= defaults to us-central1)" >&2; exit 1; }
	$(PY) -m pipeline.kubeflow_v2_runner submit --output_dir=$(OUTPUT_DIR) $(KFP_ARGS)

clean:
	rm -rf $(VENV) outputs .pytest_cache build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
