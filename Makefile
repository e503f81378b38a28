# Every workflow of the course is a target. Targets set up their own environment on first use:
# a .venv with PyTorch (the CPU build where there is no NVIDIA GPU), Triton, pytest, JupyterLab
# and matplotlib; grade and release add nbgrader, test and verify-* the maintainers' tools.
# Use your own environment instead with PYTHON=/path/to/python.
#
#   make check [M=missing-elements/03-softmax] [K=<function>|<part>] [IMPL=solutions|<folder>] [MEMCHECK=0] [GPUCHECK=0]
#   make progress | make bench M=... [HOST=1] [AGAINST="compile liger"|all] | make lab | make stubs | make test | make lint
#   make grade [SUBMISSIONS=<folder or LMS zip>] [STUDENT=..] [M=..] [REGRADE=1] [ROSTER=..] [DEADLINES=..] | make release   (instructors)
#   make verify-gpu   (maintainers, on a GPU: the whole suite natively, then every benchmark)
#   make mutants [M=...] [EXTRA=file.py]   (maintainers: the kill table of the typical mistakes)
#   make verify-secrets [M=...] [SECRETS=8]   (maintainers: every case of the references, many secrets)
#   make verify-versions [ROWS="--row oldest"]   (maintainers: the references on the oldest and newest versions)

PYTHON ?= .venv/bin/python
BOOTSTRAP_PYTHON ?= python3
M ?=
IMPL ?= learner
K ?=
HOST ?=
AGAINST ?=
MEMCHECK ?= 1
GPUCHECK ?= 1
SUBMISSIONS ?=
SECRETS ?= 8
ROWS ?=
# make verify-gpu's parallel pass is mostly Triton compiling (CPU work): three workers per four cores.
GPU_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 4); echo $$(( n * 3 / 4 > 1 ? n * 3 / 4 : 1 )))
# The grader's own tests each grade as if the GPU were theirs (memory caps, child processes):
# fewer of them share it, and each budgets its share of the memory (GRADER_GPU_SHARED_BY).
GPU_GRADER_WORKERS ?= 4
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

ifeq ($(PYTHON),.venv/bin/python)
ENV := .venv/.ready
GRADING_ENV := .venv/.grading
DEV_ENV := .venv/.dev
else
ENV :=
GRADING_ENV :=
DEV_ENV :=
endif
# The Pythons the course supports (grader/core/versions.py holds the same range).
SUPPORTED_PYTHON := import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)
# nbgrader, which grade and release use, needs 3.11 (versions.GRADING_PYTHON).
GRADING_PYTHON := import sys; sys.exit(0 if sys.version_info[:2] >= (3, 11) else 1)

.PHONY: help check progress bench stubs test lint mutants verify-gpu verify-secrets verify-versions lab grade release clean-env

help:
	@sed -n '1,11p' Makefile | sed 's/^# \{0,1\}//'

.venv/.ready: pyproject.toml
	@$(BOOTSTRAP_PYTHON) -c "$(SUPPORTED_PYTHON)" 2>/dev/null || { \
		echo "$(BOOTSTRAP_PYTHON) is Python $$($(BOOTSTRAP_PYTHON) -c 'import platform; print(platform.python_version())' 2>/dev/null || echo '(not found)'), but the course needs Python 3.10 to 3.13: run the same command with BOOTSTRAP_PYTHON=python3.12 (or another of those) added."; \
		exit 2; }
	@if [ -e .venv ] && [ "$$(.venv/bin/python -c 'import platform; print(platform.python_version())' 2>/dev/null)" != "$$($(BOOTSTRAP_PYTHON) -c 'import platform; print(platform.python_version())')" ]; then \
		echo "Rebuilding .venv with $(BOOTSTRAP_PYTHON): the one there was made with another Python (or is broken)."; \
		rm -rf .venv; \
	fi
	$(BOOTSTRAP_PYTHON) -m venv .venv
	.venv/bin/python -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "NVIDIA GPU found: installing PyTorch with CUDA"; \
		.venv/bin/python -m pip install -q "torch>=2.11,<2.16"; \
	else \
		echo "No NVIDIA GPU: kernels will run in Triton's interpreter."; \
		if .venv/bin/python -c "import urllib.request as u; u.urlopen('$(TORCH_CPU_INDEX)/', timeout=5)" 2>/dev/null; \
		then extra="--extra-index-url $(TORCH_CPU_INDEX)"; echo "Installing the CPU build of PyTorch."; \
		else extra=""; echo "The PyTorch CPU index ($(TORCH_CPU_INDEX)) cannot be reached: installing PyTorch from the general index."; fi; \
		.venv/bin/python -m pip install -q --no-deps "torch==$(TORCH_VERSION)" $$extra; \
	fi
	.venv/bin/python -m pip install -q -e ".[notebooks]"
	@.venv/bin/python -c "import torch; print('Installed PyTorch', torch.__version__, '(a CUDA build: several GB, and it runs on a CPU too)' if torch.version.cuda else '(the CPU build)')"
	@touch $@

# Instructors: nbgrader, on top of the learners' environment.
.venv/.grading: .venv/.ready
	@.venv/bin/python -c "$(GRADING_PYTHON)" || { \
		echo "Grading needs nbgrader, which needs Python 3.11 or newer, and .venv has Python $$(.venv/bin/python -c 'import platform; print(platform.python_version())'): run make clean-env, then the same command with BOOTSTRAP_PYTHON=python3.12 (or 3.11 or 3.13) added."; \
		exit 2; }
	.venv/bin/python -m pip install -q -e ".[grading]"
	@touch $@

# Maintainers: everything, the test tools included.
.venv/.dev: .venv/.ready
	.venv/bin/python -m pip install -q -e ".[dev]"
	@touch $@ .venv/.grading

check: $(ENV)
	@$(if $(filter 0,$(GPUCHECK)),GRADER_GPU_COMPILE=0 )$(PYTHON) -m grader check $(M) --impl $(IMPL) $(if $(filter 0,$(MEMCHECK)),--no-memcheck) $(if $(K),--function $(K))

progress: $(ENV)
	@$(PYTHON) -m grader progress

bench: $(ENV)
	@$(PYTHON) -m grader bench $(M) --impl $(IMPL) $(if $(filter 1,$(HOST)),--host) $(if $(AGAINST),--against '$(AGAINST)')

stubs: $(ENV)
	@$(PYTHON) -m grader stubs $(if $(FORCE),--force)

# Two workers, a test file each at a time: a file's expensive fixtures (a graded class, a Ray
# cluster, an nbgrader course) are built once, and the interpreter-bound tests use both cores.
test: $(DEV_ENV)
	@if [ ! -d solutions ]; then \
		echo "The course's own test suite needs the instructor's solutions/, which this copy does not have."; \
		echo "To test your kernels, run: make check M=<track>/<module>"; exit 2; fi
	$(PYTHON) -m pytest --impl=solutions -n 2 --dist loadfile

# The grader and the tests, held to pyproject.toml's ruff rules and format (`ruff format grader tests`
# fixes the layout).
lint: $(DEV_ENV)
	$(PYTHON) -m ruff check grader tests
	$(PYTHON) -m ruff format --check grader tests

# On a GPU, correctness first, spread over several workers (most of it is compiling, CPU work):
# the kernels' tests (each module's, the planted mistakes, the configs) before the grader's own,
# so that a run cut short has checked the kernels; then the tests that time the GPU, one at a time
# with the GPU to themselves; last, the interpreter's instrumentation on this machine's Triton (the
# traffic report watches the interpreter). Every part runs; the target fails if any of them failed.
verify-gpu: $(DEV_ENV)
	@failed=0; \
	GRADER_AUTOTUNE=first $(PYTHON) -m pytest --impl=solutions -n $(GPU_WORKERS) --dist loadfile -m "not timed" --failures-at-once tracks tests/course || failed=1; \
	GRADER_AUTOTUNE=first GRADER_GPU_SHARED_BY=$(GPU_GRADER_WORKERS) $(PYTHON) -m pytest --impl=solutions -n $(GPU_GRADER_WORKERS) --dist loadfile -m "not timed" --failures-at-once tests --ignore=tests/course || failed=1; \
	$(PYTHON) -m pytest --impl=solutions -m timed --failures-at-once || failed=1; \
	GRADER_DEVICE=cpu $(PYTHON) -m pytest -q --impl=solutions tests/core/test_traffic.py tests/core/test_memcheck.py \
		tracks/optimization -k "traffic or memory or memcheck" || failed=1; \
	exit $$failed

# Each typical mistake planted into its reference: the cases that kill it, a score per module.
mutants: $(DEV_ENV)
	$(PYTHON) -m grader mutants $(if $(M),--module $(M)) $(if $(EXTRA),--extra $(EXTRA))

# A hidden case's inputs come from the run's secret: the references must pass for any of them.
verify-secrets: $(DEV_ENV)
	GRADER_AUTOTUNE=first $(PYTHON) -m grader sweep-secrets $(if $(M),--module $(M)) --secrets $(SECRETS)

# Fresh environments for the oldest and the newest supported versions (docs/maintainers.md).
verify-versions: $(ENV)
	$(PYTHON) -m grader.authoring.version_matrix $(ROWS)

lab: $(ENV)
	@$(PYTHON) -m grader lab -- $(LAB_ARGS)

grade: $(GRADING_ENV)
	@$(PYTHON) -m grader grade $(SUBMISSIONS) $(foreach s,$(STUDENT),--student $(s)) $(foreach m,$(M),--module $(m)) \
		$(if $(filter 1,$(REGRADE)),--regrade) $(if $(ROSTER),--roster $(ROSTER)) $(if $(DEADLINES),--deadlines $(DEADLINES)) \
		$(if $(PER_GPU),--per-gpu $(PER_GPU)) $(if $(RAY),--ray $(filter-out 1,$(RAY)))

release: $(GRADING_ENV)
	@$(PYTHON) -m grader release

clean-env:
	rm -rf .venv
