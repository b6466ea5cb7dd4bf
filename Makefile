# Two entry points: `make demo` (the main job on the embedded default corpus) and `make test`.
# Each creates the virtual environment it needs and installs into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# `make demo` needs only the core and the report extra (matplotlib): its own small environment, not .venv's 2 GB.
DEMO_VENV ?= .venv-demo
DEMO_BIN := $(DEMO_VENV)/bin
# MosaicML Streaming's own reader checks `--format mds` exports from an environment of its own (docs/export.md).
MDS_VENV ?= .venv-mds
MDS_PYTHON := $(abspath $(MDS_VENV))/bin/python
RUN_DIR ?= runs/demo
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test mds-check lint bench clean

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch first, so sentence-transformers does not pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e '.[all,test]'
	# litdata requires torchvision, whose PyPI build for torch 2.13.0 is CUDA-only and fails to import next to the
	# CPU torch; litdata's writer and reader never import it, so it goes in without its requirements (the export
	# extra lists the others).
	$(BIN)/pip install -q -c constraints.txt --no-deps litdata==0.2.76
	touch $@

$(MDS_VENV)/.installed: scripts/mds-env.sh scripts/mds-requirements.txt
	rm -f $@
	PYTHON=$(PYTHON) bash scripts/mds-env.sh $(MDS_VENV)

$(DEMO_BIN)/.installed: pyproject.toml constraints.txt
	rm -rf $(DEMO_VENV)
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_BIN)/pip install -q -c constraints.txt -e '.[report]'
	touch $@

demo: $(DEMO_BIN)/.installed
	$(DEMO_BIN)/clusterclip run --out $(RUN_DIR)
	$(DEMO_BIN)/clusterclip report $(RUN_DIR)

# The whole suite against real dependencies: .venv (every extra), .venv-mds (streaming's own MDS reader) and, as root
# with apt-get, a system-wide Chromium for the browser test of the report; then the 15 slowest tests are listed.
# TEST_WORKERS pytest-xdist workers (auto: one per core) run the test modules side by side; the tests that share Ray or
# torch's local ports run on one worker (tests/suite.py). A run stopped by a signal, or by the end of make itself,
# prints its counts so far and the tests it was running (`exec`: make, not a shell, is pytest's parent).
TEST_WORKERS ?= auto
test: $(BIN)/.installed $(MDS_VENV)/.installed
	bash scripts/install-chromium.sh
	$(BIN)/ruff check src tests benchmarks
	CLUSTERCLIP_MDS_PYTHON=$(MDS_PYTHON) exec $(BIN)/pytest -q -ra --durations=15 -n $(TEST_WORKERS) --dist loadgroup \
		--stop-with-parent

mds-check: $(BIN)/.installed $(MDS_VENV)/.installed
	CLUSTERCLIP_MDS_PYTHON=$(MDS_PYTHON) $(BIN)/pytest -q -ra tests/test_export_mds.py

lint: $(BIN)/.installed
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(MDS_VENV) runs clusterclip-run .pytest_cache .ruff_cache
