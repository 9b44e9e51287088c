# Two commands do everything on a fresh machine: `make train` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: train test install clean results

install: $(STAMP)

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.txt
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/python train.py --config=configs/post_norm_96l.py --workdir=runs/post_norm_96l

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 tests

clean:
	rm -rf runs

# Regenerates docs/results.md and docs/figures/ (about 40-60 minutes on 2 cores; finished runs are reused).
results: $(STAMP)
	$(BIN)/python -m resnorm.results --root=runs/results --jobs=2
