# Two commands do everything on a fresh machine: `make run` and `make test` (everything; `make check`
# is its quick tier, for while you work: tests/conftest.py says what it leaves out and why).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
REAL ?= ../shared/data/real
# The profile `make run` converts: PROFILE=dir, else the real 2-rank sample when it is beside
# this checkout, else a small profile the fixture generator writes.
EXAMPLE := build/example-profile
PROFILE ?= $(if $(wildcard $(REAL)/msprof-2rank),$(REAL)/msprof-2rank,$(EXAMPLE))
KIND ?= detail
OUT ?= build/$(notdir $(abspath $(PROFILE))).pftrace

.PHONY: setup test-setup run test check docs bench fuzz lint clean browser

# What running needs, and no more (`make run`); the C extensions recompile when a .c file changes.
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(wildcard converters/*.[ch] converters/*/*.[ch] converters/*/*/*.[ch])
	@echo '#include <sqlite3.h>' | $${CC:-cc} -E - >/dev/null 2>&1 || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libsqlite3-dev >/dev/null) || \
		echo "make: no sqlite3.h (libsqlite3-dev): the database reader's C core cannot compile"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

# What the tests, lint and benchmarks need besides (pytest, HTA, dask, playwright, ...): a stamp
# of its own, so a changed .c file recompiles once (setup) and the extras stay installed.
test-setup: $(VENV)/.installed-test

$(VENV)/.installed-test: pyproject.toml | $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

$(EXAMPLE): | setup
	$(PY) -m fixtures.msprof_gen $(EXAMPLE) --ranks 2 --steps 5 --seed 1

run: setup $(if $(filter $(EXAMPLE),$(PROFILE)),$(EXAMPLE))
	@mkdir -p $(dir $(OUT))
	$(VENV)/bin/trace2perfetto $(PROFILE) --kind $(KIND) -o $(OUT)

# The report's browser test drives Debian's chromium; where it cannot be installed the test skips.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium >/dev/null) || echo "make: no chromium: the browser test will skip"

REALDATA = TRACE2PERFETTO_REALDATA=$${TRACE2PERFETTO_REALDATA:-$(if $(wildcard $(REAL)),$(abspath $(REAL)))}

test: setup test-setup browser
	$(REALDATA) HYPOTHESIS_PROFILE=full $(PY) -m pytest

# The quick tier (under 3 minutes of CPU): no test marked slow, property tests at a few examples, one
# real sample per format. Generated profiles are cached under build/fixture-cache (`make clean` drops them).
check: setup test-setup
	$(REALDATA) HYPOTHESIS_PROFILE=check $(PY) -m pytest -m "not slow" -q

# docs/reference.md's generated part, from the command table and schemas/ (tests/test_reference.py).
docs: setup test-setup
	$(PY) -m bench.reference

# The mutation corpus (bench/fuzz.py): ~6,000 hostile inputs, each one mutation of one file of a real
# sample or a generated profile, through every command; fails on a traceback, an internal error, a
# hang, a partial output, a changed input or a trace the trace processor repairs. FUZZ_ARGS="--cases N".
fuzz: setup test-setup
	$(REALDATA) $(PY) -m bench.fuzz $(FUZZ_ARGS)

# Generates ~100 MB to ~2 GB profiles under build/bench, installs MindInsight 2.3.1 into its own
# venv there (the peer; it pins an old protobuf), and rewrites the results in BENCHMARKS.md.
bench: setup test-setup
	$(PY) -m bench.run $(BENCH_ARGS)

lint: test-setup
	$(VENV)/bin/ruff check converters trace2perfetto tests fixtures bench

clean:
	rm -rf build $(VENV)
