# hpcnb: two commands on a fresh Debian/Ubuntu machine or laptop.
#
#   make lab    set everything up, open the course in JupyterLab (local Slurm; PORT=8888, ROLE=instructor)
#   make test   set everything up, run every test
#
# Other targets: setup, lab-instructor (nbgrader's menus kept), test-unit, test-lessons, test-lessons-site (PROFILE=narval), test-mutants, test-parity and test-real-course (after real-slurm-up),
#                real-slurm-up, real-slurm-down, test-parity-2411 (after real-slurm-2411-up),
#                real-slurm-2411-up, real-slurm-2411-down, portal and test-portal (as root;
#                docs/portal.md), test-gpu (on a GPU node: test-artifacts/gpu-report.md),
#                test-gpu-rehearsal (its steps on the CPU), clean.
# Variables: PYTHON (default python3), VENV (default .venv),
#            TORCH_INDEX_URL (an extra pip index: https://download.pytorch.org/whl/cpu
#            for the CPU build of torch; on Linux PyPI's is the CUDA build, several GB).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
TORCH_INDEX_URL ?=
STAMP := $(VENV)/.setup-stamp
PIP := $(VENV)/bin/python -m pip --disable-pip-version-check
PIP_EXTRA := $(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL),)

# The setup is redone when any of these change (or when hpcnb/cli.py appears,
# which enables the kernel install step).
SETUP_INPUTS := pyproject.toml ci/build-horovod.sh
SETUP_KEY = $(shell cat $(SETUP_INPUTS) 2>/dev/null | sha256sum | cut -c1-32)-cli$(if $(wildcard hpcnb/cli.py),1,0)

.PHONY: help setup lab lab-instructor test test-unit test-lessons test-lessons-site test-mutants test-parity test-parity-2411 test-real-course portal test-portal test-gpu test-gpu-rehearsal \
	real-slurm-up real-slurm-down real-slurm-2411-up real-slurm-2411-down clean

help:
	@sed -n '2,12p' Makefile | sed 's/^# \{0,1\}//'

setup:
	@if [[ $$(id -u) -eq 0 ]]; then bash ci/install-system-deps.sh; \
	 else bash ci/install-system-deps.sh || { echo "make setup: install the system packages above first" >&2; exit 1; }; fi
	@if [[ -x $(VENV)/bin/python && -f $(STAMP) && "$$(cat $(STAMP))" == "$(SETUP_KEY)" ]]; then \
	    echo "make setup: $(VENV) is up to date"; \
	 else \
	    $(MAKE) --no-print-directory _setup-venv; \
	 fi

_setup-venv:
	@start=$$SECONDS; \
	rm -f $(STAMP); \
	if [[ ! -x $(VENV)/bin/python ]]; then \
	    echo "make setup: creating $(VENV) with $$($(PYTHON) --version)"; \
	    $(PYTHON) -m venv $(VENV); \
	fi; \
	echo "make setup: pip install -e '.[all]' (torch 2.13.0: on Linux PyPI's is the CUDA build, several GB;" \
	     "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu or a local wheel gives the CPU build)"; \
	$(PIP) install --quiet $(PIP_EXTRA) -e '.[all]'; \
	$(VENV)/bin/python -c 'import torch; print("make setup: torch", torch.__version__, \
	    "(CUDA " + torch.version.cuda + " build)" if torch.version.cuda else "(CPU build)")'; \
	bash ci/build-horovod.sh $(VENV); \
	if [[ -f hpcnb/cli.py && -x $(VENV)/bin/hpcnb ]]; then \
	    echo "make setup: installing the course Jupyter kernel"; \
	    $(VENV)/bin/hpcnb kernel install --sys-prefix; \
	else \
	    echo "make setup: no hpcnb/cli.py yet, skipping the kernel install"; \
	fi; \
	echo "$(SETUP_KEY)" > $(STAMP); \
	echo "make setup: done in $$((SECONDS - start)) s"

# lesson 3b's Charliecloud image (as root, about a minute once, then cached; ci/build-container.sh):
# without it the lesson skips its container job and exercise 3b.3 cannot be done or graded
define container-image
	@bash ci/build-container.sh >/dev/null || echo "make: no container image: lesson 3b skips its container job," \
	    "exercise 3b.3 cannot run (as root: bash ci/build-container.sh)" >&2
endef

# make lab [PORT=8888] [ROLE=student|instructor] (JUPYTER_PORT: PORT's old name): the course's Lab
# (hpcnb/course/lab.py): START.md first; its terminals have hpcnb and the notebooks' Slurm first on
# PATH (the local one unless HPCNB_SLURM=real); a student's Lab without nbgrader's instructor menus.
PORT ?= $(JUPYTER_PORT)
ROLE ?= student
LAB_COMMAND = HPCNB_SLURM=$${HPCNB_SLURM:-local} $(VENV)/bin/python -m hpcnb.course.lab --role $(ROLE)$(if $(PORT), --port $(PORT))

lab: setup
	$(container-image)
	$(LAB_COMMAND)

lab-instructor:
	@$(MAKE) --no-print-directory lab ROLE=instructor

# The tests.  pytest's exit code 5 means "no tests collected"; it is reported but not treated as
# a failure, so that a suite part that is still empty does not break the run.  Nothing may hang:
# every pytest run has a time limit (RUN_LIMIT s, then SIGTERM), every test one (pyproject.toml)
# and every notebook cell one (CELL_LIMIT s); a failing cell shows the Slurm jobs at that moment.
RUN_LIMIT ?= 1500
# three workers on two cores: most of a test's time is spent waiting for jobs and processes
TEST_WORKERS ?= 3
CELL_LIMIT ?= 300
PYTEST := HPCNB_SLURM=local timeout -k 30 $(RUN_LIMIT) $(VENV)/bin/python -m pytest
NBVAL := -n 2 --dist loadfile --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg \
	--nbval-cell-timeout=$(CELL_LIMIT) -p no:cacheprovider
define pytest-cmd
echo "== pytest $(1)"; \
	start=$$SECONDS; rc=0; $(PYTEST) $(1) || rc=$$?; \
	echo "== pytest $(firstword $(2)) done in $$((SECONDS - start)) s (exit $$rc)"; \
	if [[ $$rc -eq 124 ]]; then echo "make test: pytest ran past $(RUN_LIMIT) s and was stopped" >&2; exit $$rc; \
	elif [[ $$rc -eq 5 ]]; then echo "make test: WARNING: no tests collected by: pytest $(1)"; \
	elif [[ $$rc -ne 0 ]]; then exit $$rc; fi
endef
define pytest
	@$(call pytest-cmd,$(1),$(2))
endef

# make test: the unit tests on the local Slurm, then every lesson notebook (nbval). Every solution
# notebook runs end to end in the unit tests already, through the autograder, which wants full
# marks (tests/test_grading.py); make test-real-course runs them under nbval on the real Slurm.
define nbval-lessons
	@state=$$(mktemp -d); export HPCNB_STATE_DIR=$$state; \
	 trap '$(VENV)/bin/hpcnb slurm reset >/dev/null 2>&1; rm -rf "$$state"' EXIT; \
	 $(call pytest-cmd,$(NBVAL) notebooks,notebooks)
endef

test: test-unit
	$(nbval-lessons)

# make test-unit: make test's first half, the unit tests alone.
# First, alone, the tests in which another user listens on every address of the machine (every
# gateway withholds its names meanwhile: tests/test_gateway_users.py).
test-unit: setup
	$(container-image)
	$(call pytest,-m another_user_listens --ignore=tests/parity tests,another-user)
	$(call pytest,-n $(TEST_WORKERS) --dist loadscope --durations=15 -m "not another_user_listens" --ignore=tests/parity tests,tests)

# make test-gpu: on a machine with a CUDA GPU (the site's GPU node, before a workshop), the course's GPU
# paths in <= 6 min: CUDA-only tests, every job script with --gres=gpu:1, lessons 6 and 7; writes
# test-artifacts/gpu-report.md. Without a GPU it says so and exits 0. No setup: GPU_PYTHON=... runs it with
# a site's torch (else the venv's, else python3).
test-gpu:
	@VENV=$(VENV) bash ci/test-gpu.sh

# make test-gpu-rehearsal: its steps without a GPU, but the two that only run the tests make test runs
# (on the CPU: about 2 min on 2 cores), into test-artifacts/gpu-rehearsal.md: proves the steps and the
# scripts' command lines, not the GPU (CI runs it).
test-gpu-rehearsal: setup
	@VENV=$(VENV) bash ci/test-gpu.sh --rehearse

# make test-lessons: the lessons alone, as make test runs them, on a fresh local Slurm; with
# HPCNB_SLURM_VERSION=22.05 it behaves as that release instead of the profile's (24.11).
test-lessons: setup
	$(nbval-lessons)

# make test-lessons-site PROFILE=cscs-alps: the lessons as make test runs them, on a local Slurm made
# from that site's profile (partitions, project rule, GPUs per node, no SLURM_TMPDIR...): every job
# script is the site's (%%jobscript). Cells that show the chosen site run but are not compared with
# the local recording (conftest.py); every other checked output is.
# It runs a private copy of notebooks/, so that it may run beside another lane of the lessons.
# LESSONS='notebooks/0[1-5]*.ipynb' runs some of them.
PROFILE ?= narval
LESSONS ?= notebooks
test-lessons-site: setup
	@copy=$$(mktemp -d); state=$$(mktemp -d); export HPCNB_STATE_DIR=$$state; \
	 trap '$(abspath $(VENV))/bin/hpcnb slurm reset >/dev/null 2>&1; rm -rf "$$state" "$$copy"' EXIT; \
	 mkdir -p "$$copy/tests" && cp -r notebooks conftest.py pyproject.toml "$$copy/" && \
	 cp tests/nbval_sanitize.cfg "$$copy/tests/" && rm -rf "$$copy/notebooks/work" && cd "$$copy" && \
	 echo "== pytest $(LESSONS) at $(PROFILE) (a copy in $$copy)" && start=$$SECONDS && rc=0 && \
	 { HPCNB_SLURM=local timeout -k 30 $(RUN_LIMIT) $(abspath $(VENV))/bin/python -m pytest $(NBVAL) $(LESSONS) || rc=$$?; } && \
	 echo "== pytest $(LESSONS) at $(PROFILE) done in $$((SECONDS - start)) s (exit $$rc)" && exit $$rc
test-lessons-site: export HPCNB_PROFILE = $(PROFILE)

# make test-mutants: every exercise's graded test fails on a planted wrong answer (tests/mutants.py),
# each run in the course kernel on a local Slurm (274 wrong answers, at least 5 per graded cell; a table of
# the caught ones per cell at the end). MUTANTS=all also runs
# every exercise with its real solution, and autogrades each solution notebook with one exercise's
# answer made wrong at a time (tests/test_grading.py; about 25 min more).
MUTANTS ?= 1
test-mutants: setup
	$(container-image)
	$(call pytest,-n 2 --durations=10 tests/test_mutants.py $(if $(filter all,$(MUTANTS)),tests/test_grading.py),mutants)
test-mutants: export HPCNB_MUTANTS = $(MUTANTS)

# make test-parity: the local Slurm against the real one (start it first: make real-slurm-up).
test-parity: setup
	@export HPCNB_REAL_SLURM=22.05; $(call pytest-cmd,--durations=10 tests/parity,parity)

# make test-parity-2411: the same suite against the real Slurm 24.11 of a Debian 13 chroot (as root;
# start it first: make real-slurm-2411-up). Table of both lanes: python -m tests.parity.report --no-run
test-parity-2411: setup
	@export HPCNB_REAL_SLURM=24.11; $(call pytest-cmd,--durations=10 tests/parity,parity-2411)

# make test-real-course: every lesson and solution, unchanged, on the real Slurm, run by an
# unprivileged user with its own venv (as root; start the real Slurm first: make real-slurm-up).
# A real Slurm is slower where users wait for it too: a requeued job waits 120 s before it may
# start again, time limits and --signal count in minutes (lesson 12's cells take up to ~5 min).
REAL_CELL_LIMIT ?= 600
test-real-course: setup
	$(container-image)
	CELL_LIMIT=$(REAL_CELL_LIMIT) RUN_LIMIT=$(RUN_LIMIT) bash ci/real-course.sh

# make portal: a workshop's JupyterHub on this machine (as root), in the foreground: a login page,
# each user's notebook server a Slurm job. Ctrl-C stops the hub, the proxy and the servers' jobs.
# Settings (docs/portal.md; ci/portal.sh reads them from the environment):
# PORTAL_USERS (a count or names), PORTAL_PASSWORD, PORTAL_PORT, PORTAL_SLURM (local|real), PORTAL_TIME,
#            PORTAL_MEM.
portal: setup
	bash ci/portal.sh install
	bash ci/portal.sh run

# make test-portal: in a browser, the student logs in, gets a server (a Slurm job) and runs lesson 1
# in it (then lesson 8's cells on the notebook's own node: an srun --overlap step into the server's job), and the Open OnDemand app (ondemand/) starts the course in a Slurm job; on the local Slurm, then on the real one (start it first: make real-slurm-up; others who
# share it: flock /tmp/real-slurm.lock make test-portal). PORTAL_TESTS=local runs one of them.
PORTAL_TESTS ?= local real
test-portal: setup
	PORTAL_USERS="hpcnb-student hpcnb-student2" bash ci/portal.sh install
	@for slurm in $(PORTAL_TESTS); do \
	    HPCNB_PORTAL_TEST=$$slurm; export HPCNB_PORTAL_TEST; \
	    $(call pytest-cmd,-p no:cacheprovider -s tests/test_portal.py tests/test_ondemand.py,portal-$$slurm); \
	done

real-slurm-up:
	bash ci/real-slurm.sh up

real-slurm-down:
	bash ci/real-slurm.sh down

real-slurm-2411-up:
	bash ci/real-slurm.sh up 24.11

real-slurm-2411-down:
	bash ci/real-slurm.sh down 24.11

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache test-artifacts
	find . -path ./.git -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -prune -exec rm -rf {} +
