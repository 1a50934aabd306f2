# dsgraph: `make demo` runs the main job on the built-in default; `make test` runs the tests.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= configs/default.yaml
# The install stamp is keyed on the dependency list and the pinned stack (constraints.txt):
# editing either reinstalls, nothing else does.
STAMP := $(VENV)/.stamp-$(shell sha1sum setup.cfg pyproject.toml constraints.txt | sha1sum | cut -c1-12)

.PHONY: install partition train demo bench test test-fast graphstorm-venv clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip<25"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	rm -f $(VENV)/.stamp-*
	touch $@

partition: install
	$(BIN)/python -m partition --config $(CONFIG) $(ARGS)

# A repeated `make train` replaces the previous run folder; use `python -m train --resume` to continue one.
train: install
	$(BIN)/python -m train --config $(CONFIG) --force $(ARGS)

demo: install
	$(BIN)/python -m partition --config $(CONFIG) --if-missing
	$(BIN)/python -m train --config $(CONFIG) --force

bench: install
	$(BIN)/python -m benchmarks all $(ARGS)

# The GraphStorm peer of the scale benchmark (benchmarks/graphstorm_trainer.py) needs what dsgraph
# does not (transformers, ogb, h5py, scikit-learn): its own venv on the same pinned torch and DGL.
# GraphStorm 0.4.0: 0.4.1 and later pin torchdata 0.9.0, which DGL 2.1.0's torch cannot take.
GS_VENV := .venv-graphstorm
graphstorm-venv: $(GS_VENV)/.installed

$(GS_VENV)/.installed: constraints.txt Makefile
	test -x $(GS_VENV)/bin/python || $(PY) -m venv $(GS_VENV)
	$(GS_VENV)/bin/python -m pip install --quiet --upgrade "pip<25"
	$(GS_VENV)/bin/python -m pip install --quiet -c constraints.txt graphstorm==0.4.0 \
		transformers==4.36.0 torch dgl torchdata pandas pydantic pyyaml tqdm
	touch $@

# `make test` runs every test: the unit tests and every multi-process job. Test files run in
# TEST_WORKERS processes (pytest-xdist; a file's tests stay together, so its module fixtures are
# built once, session fixtures once per worker): a multi-process test mostly waits on barriers,
# timeouts and peers, so three at a time keep 2 cores busy (four were no faster).
# TEST_WORKERS=0 runs them in this process. Job processes are forked from a pre-imported one per
# worker (tests/conftest.py); DSGRAPH_TEST_PRELOAD=0 starts each fresh.
TEST_WORKERS ?= 3
XDIST = -n $(TEST_WORKERS) --dist loadfile

test: install
	$(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) $(ARGS)

# `make test-fast` leaves out the tests marked `slow` (in tests/dist, every test not decorated
# `@pytest.mark.fast`: see tests/dist/conftest.py): the unit tests and one end-to-end job per train
# mode (sampled, sar, dsmpnn) remain, a check while working.
test-fast: install
	$(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) -m "not slow" $(ARGS)

clean:
	rm -rf $(VENV) $(GS_VENV) data runs partitions .pytest_cache *.egg-info
