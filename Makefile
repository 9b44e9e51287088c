# Two commands do everything on a fresh machine: `make train` and `make test`.
# They install the package with the exact CPU lock as constraints: .venv from requirements/lock-py3.11.txt, with
# $(PYTHON). `make test PY=3.12` (any target, any PY with a requirements/lock-pyPY.txt) uses its own .venv-pyPY,
# made by pythonPY found on PATH or else under $(pyenv root)/versions/PY*/bin/; it fails when there is none.
PYTHON ?= python3
# Extra pytest arguments for `make test` and `make test-integration`, e.g. PYTEST_ARGS="-k reference".
PYTEST_ARGS ?=
PY ?=
ifeq ($(PY),)
VENV ?= .venv
LOCK := requirements/lock-py3.11.txt
else
VENV ?= .venv-py$(PY)
LOCK := requirements/lock-py$(PY).txt
endif
# The package's extras installed into the venv: `make test PY=3.12 EXTRAS=test,tpu` adds libtpu (the TPU compiler of
# the memory plan, docs/scaling.md), as CI's 3.12 leg does.
EXTRAS ?= test
BIN := $(VENV)/bin
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

# The first of pythonPY on PATH and $(pyenv root)/versions/PY*/bin/pythonPY (newest first) that runs and is PY
# (a pyenv shim on PATH is there but fails when another version is selected).
FIND_PYTHON = for p in $$(command -v python$(PY)) \
    $$(ls -d "$$(pyenv root 2>/dev/null || echo '$$(pyenv root)')"/versions/$(PY)*/bin/python$(PY) 2>/dev/null | sort -rV); do \
  "$$p" -c 'import sys; sys.exit(sys.version_info[:2] != tuple(map(int, "$(PY)".split("."))))' 2>/dev/null \
    && { echo "$$p"; break; }; done

.PHONY: train test test-integration install clean results results-from-records

install: $(STAMP)

$(LOCK):
	@echo "no lock for Python $(PY): $(LOCK) does not exist" >&2; exit 1

$(STAMP): $(LOCK) pyproject.toml
ifeq ($(PY),)
	$(PYTHON) -m venv $(VENV)
else
	@py=$$($(FIND_PYTHON)); \
	if [ -z "$$py" ]; then \
	  echo "Python $(PY) not found: looked for python$(PY) on PATH and $$(pyenv root 2>/dev/null || echo '$$(pyenv root)')/versions/$(PY)*/bin/python$(PY)" >&2; \
	  exit 1; \
	fi; \
	echo "$$py -m venv $(VENV)"; "$$py" -m venv $(VENV)
endif
	$(BIN)/pip install -q -c $(LOCK) -e '.[$(EXTRAS)]'
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/python train.py --config=configs/post_norm_96l.py --workdir=runs/post_norm_96l

VERSIONS = $(BIN)/python -c 'import sys, jax, flax; print("Python", sys.version.split()[0], "jax", jax.__version__, "flax", flax.__version__)'

# The fast suite: every test not marked integration (tests/README.md).
test: $(STAMP)
	@$(VERSIONS)
	$(BIN)/python -m pytest -q -n 2 -m 'not integration' $(PYTEST_ARGS) tests

# The end-to-end tests: a real SLURM (root, Debian's slurm-wlm), the GCS emulator, several processes, train.py and
# eval.py as subprocesses, the report pipeline.
test-integration: $(STAMP)
	@$(VERSIONS)
	$(BIN)/python -m pytest -q -n 2 -m integration $(PYTEST_ARGS) tests

clean:
	rm -rf runs

# Regenerates docs/results.md and docs/figures/ on both corpora: runs what has no record in results/v4/ yet (a
# record is written as each run finishes; a stopped grid resumes anywhere), then builds the report from the records
# (docs/sweeps.md). `make results-from-records` rebuilds the report from the committed records alone, with no run.
results: $(STAMP)
	$(BIN)/python -m resnorm.results --root=runs/results --jobs=2

results-from-records: $(STAMP)
	$(BIN)/python -m resnorm.results --from_records
