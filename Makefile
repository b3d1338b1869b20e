# tflab: TensorFlow multi-node training reproduced on one host with Docker Compose.
#
#   make up STRATEGY=multiworker WORKERS=3    # build what is needed, train, print a summary
#   make test                                 # every test, real Compose included
#
# The lab's settings (STRATEGY, WORKERS, EPOCHS, ...) are not Makefile variables: make hands
# command-line variables to its recipes as environment variables, and scripts/tflab/core/settings.py,
# the one place they are defined, reads and checks them. `make help` lists them with defaults.

.DEFAULT_GOAL := help
SHELL := /bin/bash

# The host's Python, for the lab's own commands: it needs no TensorFlow.
PYTHON ?= python3
# TensorFlow, pytest and Compose v2, for the tests and for BACKEND=local.
VENV ?= .venv
# Extra pytest arguments, e.g. PYTEST_ARGS="-m unit -x".
PYTEST_ARGS ?=
# make test and make test-integration run the tests on this many pytest-xdist workers side by side
# (tests/labtest/parallel.py): one per two of the engine's CPUs, as a lab run trains on about two.
# On 2 CPUs that is 1, one test after another: side by side there, heartbeats went missing
# (docs/tests.md). Read only when a test target runs.
TEST_WORKERS ?= $(shell n=$$(docker info --format '{{.NCPU}}' 2>/dev/null || nproc 2>/dev/null \
                            || sysctl -n hw.ncpu 2>/dev/null || echo 2); echo $$(( n / 2 )))
XDIST = $(if $(filter-out 0 1,$(strip $(TEST_WORKERS))),-n $(strip $(TEST_WORKERS)) --dist loadgroup)


# The Makefile's own variables. Any other NAME=value on make's command line must be a setting:
# make would take `make up WORKER=3` silently, so the lab is told the names given (settings.py
# refuses the others, naming the setting each resembles). PYTHON and PYTEST_ARGS are shell words
# on purpose (a command, pytest's arguments); nothing else a user gives is ever spliced into a
# recipe's shell source: the lab reads the names and values from its environment.
OWN_VARIABLES := PYTHON VENV PYTEST_ARGS TEST_WORKERS
COMMAND_LINE := $(strip $(foreach name,$(.VARIABLES),$(if $(filter command line,$(origin $(name))),$(name))))
# make would expand a value's $(...) itself, $(shell ...) included, wherever the Makefile or a
# recipe's environment reads it: each command-line variable is made its literal text, once. Only
# names of these characters are redefined (any other could be read as make syntax); make
# exports none of the others to a recipe, and the lab refuses them all by name.
NAME_CHARACTERS := a b c d e f g h i j k l m n o p q r s t u v w x y z A B C D E F G H I J K L M N O P Q R S T U V W \
                   X Y Z 0 1 2 3 4 5 6 7 8 9 _
without = $(if $2,$(call without,$(subst $(firstword $2),,$1),$(wordlist 2,$(words $2),$2)),$1)
$(foreach name,$(COMMAND_LINE),$(if $(call without,$(name),$(NAME_CHARACTERS) . -),,$(eval override \
  $(if $(call without,$(name),$(NAME_CHARACTERS)),,export) $(name) := $$(value $(name)))))
# A name with a line break in it reaches .VARIABLES as words that are no variable: the lab refuses it.
BROKEN_NAMES := $(strip $(foreach name,$(.VARIABLES),$(if $(filter undefined,$(origin $(name))),$(name))))
export TFLAB_MAKE_VARIABLES := $(COMMAND_LINE)
export TFLAB_MAKE_BROKEN := $(BROKEN_NAMES)
export TFLAB_MAKE_OWN := $(OWN_VARIABLES)
# VENV is a folder make names as a target and recipes as a word, so a path of plain characters.
ifneq ($(words $(VENV)) $(call without,$(VENV),$(NAME_CHARACTERS) . - / + @),1 )
$(error tflab: VENV is not allowed: expected a folder path of letters, digits and . _ - + / @ only)
endif
LAB_ENV = PYTHONPATH=scripts
LAB = $(LAB_ENV) $(PYTHON) -m tflab
VENV_PYTHON = $(abspath $(VENV))/bin/python
# Before a target builds .venv (TensorFlow and all), the host's Python checks its input.
CHECK_THEN_VENV = @TFLAB_CHECK=$@ $(LAB) check && $(MAKE) --no-print-directory venv

.PHONY: help up stack-up swarm-sim swarm-sim-down chaos soak chaos-grid compare matrix report bench config k8s migrate summary why logs tensorboard down
.PHONY: images wheels venv test test-unit test-integration test-workers arm64-emulation clean

help: ## list the targets and the settings
	@echo "Targets:"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  make %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo "Settings, as make variables (make up WORKERS=3) or environment variables; a target refuses"
	@echo "one given by name that it does not read:"
	@$(LAB) settings

up: ## train on the lab and print a summary: make up STRATEGY=mirrored
	$(if $(filter local,$(BACKEND)),$(CHECK_THEN_VENV))
	@TFLAB_PYTHON=$(VENV_PYTHON) $(LAB) up

stack-up: ## the same run as a Docker Swarm stack (needs `docker swarm init`): make stack-up WORKERS=3
	@$(LAB) stack-up

swarm-sim: ## a multi-node swarm simulated on this host (root): make swarm-sim NODES=3
	@$(LAB) swarm-sim

swarm-sim-down: ## remove the simulated swarm, and only what swarm-sim made
	@$(LAB) swarm-sim-down

chaos: ## a run with one fault on purpose: make chaos SCENARIO=kill TARGET=worker-1 AT=epoch:2
	@$(LAB) chaos

soak: ## SOAK runs with random faults: make soak SOAK=20; prints what survived, ended cleanly, hung
	@$(LAB) soak

chaos-grid: ## one job through every fault x moment; grid.md/csv/png: make chaos-grid SCENARIOS=kill MOMENTS="step:40"
	$(CHECK_THEN_VENV)
	@TFLAB_PYTHON=$(VENV_PYTHON) $(LAB_ENV) $(VENV_PYTHON) -m tflab chaos-grid

compare: ## run every strategy side by side and write report.md/csv/png: make compare MODEL=cnn
	$(CHECK_THEN_VENV)
	@TFLAB_PYTHON=$(VENV_PYTHON) $(LAB_ENV) $(VENV_PYTHON) -m tflab compare

matrix: ## run the job on every TF x KERAS x STRATEGIES; matrix.json/md/png: make matrix TF="2.15 2.21"
	$(CHECK_THEN_VENV)
	@TFLAB_PYTHON=$(VENV_PYTHON) $(LAB_ENV) $(VENV_PYTHON) -m tflab matrix

report: ## rebuild the report of a compare folder or a run from its logs (RUN=<id>)
	$(CHECK_THEN_VENV)
	@$(LAB_ENV) $(VENV_PYTHON) -m tflab report

bench: ## measure the lab's overhead, or its stall watch (BENCH=stall); one line a figure
	$(CHECK_THEN_VENV)
	@TFLAB_PYTHON=$(VENV_PYTHON) $(LAB_ENV) $(VENV_PYTHON) -m tflab bench

config: ## print the cluster spec and every task's TF_CONFIG: make config WORKERS=4
	@$(LAB) config

k8s: ## write Kubernetes manifests for the settings (a TFJob, and plain Jobs): make k8s WORKERS=4
	@$(LAB) k8s

migrate: ## replay a TFJob and its TrainJob under one fault, and what differs: make migrate TFJOB=job.yaml
	@$(LAB) migrate

summary: ## print a run's summary table (RUN=<id>, default the newest)
	@$(LAB) summary

why: ## say what broke in a run and the fix, where a script resumed, the audit's findings (RUN=<id>)
	@$(LAB) why

logs: ## print a run's merged, timestamped task output (RUN=<id>, default the newest)
	@$(LAB) logs

tensorboard: ## serve every run's loss and examples/s on 127.0.0.1:6006 (TENSORBOARD_PORT)
	@$(LAB) tensorboard

down: ## remove what the runs in RUNS_DIR (RUN=<id>: one run) left on the engine; FORCE=1: live runs too
	@$(LAB) down

images: ## build the trainer image (and its base, where no registry is reachable); GPUS=all: the GPU one
	@$(LAB) images

wheels: ## download the trainer's pinned wheels into images/trainer/wheels/ (GPUS=all: wheels-gpu/)
	@$(LAB) wheels

venv: $(VENV)/.installed ## create .venv with TensorFlow, pytest and Compose v2 for the tests

# .venv takes the CPU wheels whatever GPUS says: the tests and BACKEND=local run on CPUs. The settings
# on make's command line are the calling target's (make compare MODEL=cnn), not for `wheels` to refuse.
$(VENV)/.installed: requirements/trainer.txt requirements/test.txt scripts/get-compose-v2.sh
	@GPUS= TFLAB_MAKE_VARIABLES= $(LAB) wheels
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps --no-index \
		--find-links images/trainer/wheels -r requirements/trainer.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r requirements/test.txt
	bash scripts/get-compose-v2.sh $(VENV)
	@touch $@

test: test-workers venv arm64-emulation ## run every test: integration on real Compose (both CLIs) and unit
	$(VENV_PYTHON) -m pytest $(XDIST) $(PYTEST_ARGS)

test-unit: venv ## run the fast unit tests only
	$(VENV_PYTHON) -m pytest -m unit $(PYTEST_ARGS)

test-integration: test-workers venv arm64-emulation ## run the integration tests only (Docker required)
	$(VENV_PYTHON) -m pytest -m integration $(XDIST) $(PYTEST_ARGS)

# tests/integration/test_arm64.py runs the arm64 image under emulation. As root on Linux, where it is
# off, this turns it on (qemu-user-static from apt); otherwise, or where that fails, those tests are
# skipped saying how to include them, except under CI=true, where they fail.
arm64-emulation:
	@scripts/enable-arm64-emulation.sh --if-needed

# Refuses a TEST_WORKERS that is no whole number, in one line, before .venv is made (a prerequisite
# left of venv).
test-workers: export TFLAB_TEST_WORKERS = $(strip $(TEST_WORKERS))
test-workers:
	@case "$$TFLAB_TEST_WORKERS" in *[!0-9]*) printf "tflab: TEST_WORKERS=%q is not allowed: expected a whole \
	number of pytest workers (0 or 1: one process)\n" "$$TFLAB_TEST_WORKERS" >&2; exit 2;; esac

# VENV is removed only where it is this checkout's and this Makefile made it (its .installed).
clean: ## remove the lab's containers, images, wheels and .venv; never runs/
	@case "$(abspath $(VENV))" in "$(CURDIR)"/?*) ;; *) echo "tflab: VENV=$(VENV) is not inside this \
	checkout ($(CURDIR)); make clean removes only a .venv it made here, and leaves that folder" >&2; exit 2 ;; esac
	@if [ -e "$(VENV)" ] && [ ! -f "$(VENV)/.installed" ]; then echo "tflab: VENV=$(VENV) is not a venv this \
	Makefile made (it has no .installed); make clean leaves it" >&2; exit 2; fi
	@$(LAB) clean
	rm -rf $(VENV) .pytest_cache
