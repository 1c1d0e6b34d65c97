# Two commands do all set-up on a fresh machine with Python 3.11, 3.12 or 3.13:
#   make run    installs into .venv and runs the bank demo on embedded defaults
#   make test   installs into .venv (and Debian's chromium, if missing and apt-get can), then
#               runs ruff, import-linter (packages import downward only), mypy --strict (the
#               packages and the typing test's correct module, with orleanspy.mypy_plugin)
#               and the whole test suite: every test not marked timing on TEST_WORKERS
#               pytest-xdist workers (cores + 1, at most 6), then the timing tests alone
#               (docs/testing.md)
#   make test PYTHON=python3.13   the same on another interpreter, in a venv of its own
#               (.venv-3.13); PYTHON is found on PATH or, if only installed, through pyenv
#   make layers checks that packages import downward only (import-linter contracts)
#   make clickstream  runs the Spark pipeline example (streams -> Parquet -> Spark grain)
PYTHON ?= python3
# the interpreter itself (scripts/find-python: on PATH, or installed through pyenv)
PYTHON_EXE := $(shell sh scripts/find-python $(PYTHON) || echo $(PYTHON))
ifeq ($(origin PYTHON),file)
VENV   ?= .venv
else
VENV   ?= .venv-$(shell $(PYTHON_EXE) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo unknown)
endif
PY     := $(VENV)/bin/python
# the first step's pytest-xdist workers: one per core plus one, since much of a test waits on
# another process (0: in one process)
TEST_WORKERS ?= $(shell $(PYTHON_EXE) -c 'import os; print(min(6, (os.cpu_count() or 1) + 1))' 2>/dev/null || echo 0)
STAMP  := $(VENV)/.installed
# mypy checks the code paths of the interpreter the venv runs (turns differ on 3.11)
MYPY   = $(VENV)/bin/mypy --python-version $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')

.PHONY: run test bench lint layers install clean clickstream browser

$(STAMP): pyproject.toml
	@$(PYTHON_EXE) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "orleanspy needs Python 3.11, 3.12 or 3.13: set PYTHON=python3.11")'
	test -x $(PY) || $(PYTHON_EXE) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,redis,spark,nats,postgres,otel]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) -m examples.bank.run

clickstream: $(STAMP)
	$(PY) -m examples.clickstream.run

# The dashboard's browser test drives Debian's chromium (playwright's own browsers come from
# a CDN this project does not use): installed here when missing, if apt-get can.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (apt-get) for the dashboard's browser test"; \
	    apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } || \
	    echo "apt-get could not install chromium: the dashboard's browser test will skip"; \
	  else \
	    echo "no chromium on PATH: the dashboard's browser test will skip (apt-get install chromium)"; \
	  fi; }

test: $(STAMP) browser
	$(VENV)/bin/ruff check orleanspy silo tests benchmarks examples
	$(VENV)/bin/lint-imports
	$(MYPY)
	$(MYPY) --strict tests/typing/usage_ok.py
	@# byte-compiled once here, so the hundreds of silo and CLI processes the suite starts do
	@# not each compile the sources (PYTHONDONTWRITEBYTECODE would otherwise keep them from
	@# caching it)
	$(PY) -m compileall -q orleanspy silo tests examples >/dev/null
	@# the timing tests run after the rest, alone on the machine; both steps always run
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not timing"; rest=$$?; \
	$(PY) -m pytest -q -m timing; timing=$$?; \
	test $$rest = 0 && test $$timing = 0

layers: $(STAMP)
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	$(PY) benchmarks/grain_calls.py

lint: $(STAMP)
	$(VENV)/bin/ruff check orleanspy silo tests benchmarks examples
	$(VENV)/bin/lint-imports
	$(MYPY)
	$(MYPY) --strict tests/typing/usage_ok.py

clean:
	rm -rf .venv .venv-3.* .pytest_cache .ruff_cache .mypy_cache *.egg-info
