# `make test` and `make demo` create .venv when it is missing and install everything.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
# the venv is ~6 GB (torch's CUDA build, the only 2.14.1 on disk): no second copy in pip's cache, on
# machines whose disk is tight (a CI run once stopped at "No space left on device" while installing)
export PIP_NO_CACHE_DIR := 1

.PHONY: test test-slow demo install docs clean-venv

$(STAMP): requirements.txt requirements-sdist.txt requirements-nodeps.txt requirements-docs.txt pyproject.toml .ci/chromium.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch/torchvision first and pinned: on this machine both come from local disk
	$(PIP) install -q torch==2.14.1 torchvision==0.29.1
	$(PIP) install -q -r requirements.txt
	# visdom (imported by adv-lib) ships only an sdist whose setup.py needs pkg_resources
	$(PIP) install -q "setuptools<70" wheel
	$(PIP) install -q --no-build-isolation -r requirements-sdist.txt
	$(PIP) install -q "setuptools>=77"
	# adv-lib and cleverhans without their declared dependencies (cleverhans 4 would pull
	# tensorflow-probability; what they import at run time is in requirements.txt)
	$(PIP) install -q --no-deps -r requirements-nodeps.txt
	$(PIP) install -q --no-deps -e .
	# the documentation tools: tests/test_docs_build.py builds the site in `make test`
	$(PIP) install -q -r requirements-docs.txt
	bash .ci/chromium.sh
	touch $(DOCS_STAMP) $(STAMP)

install: $(STAMP)

# two processes, each test file on one of them (its module fixtures run once): most tests wait on
# child processes' imports, so the suite takes about half the time it takes on one process
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow"

# the opt-in rest (docs/testing.md, "Opt-in tests"): the Monte-Carlo calibration on three models,
# release audits beyond the one make test runs, and the second checks of a kill, Dask and stdin;
# CI runs it after make test
test-slow: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile -m slow

# the site with the API reference, into site/: only the docs tools are needed (mkdocstrings reads
# the source, it imports nothing), and nothing is downloaded while it builds
$(DOCS_STAMP): requirements-docs.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements-docs.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

demo: $(STAMP)
	$(VENV)/bin/attackaudit run --preset demo --out runs/demo
	$(VENV)/bin/attackaudit report runs/demo

clean-venv:
	rm -rf $(VENV)

# opt-in mutation testing, not part of `make test` (docs/testing.md: scores, survivors, run times):
# mutmut on each area of [tool.mutmut.areas] in pyproject.toml (AREAS="measure fidelity-verdicts"
# picks some), at most MUTANT_LIMIT_S seconds an area (a rerun resumes), then each file's score
MUTANT_CHILDREN ?= 1
MUTANT_LIMIT_S ?= 1200
.PHONY: mutants
mutants: $(STAMP)
	nice -n 19 $(PY) tests/run_mutants.py $(foreach a,$(AREAS),--area $(a)) --max-children $(MUTANT_CHILDREN) \
		--time-limit $(MUTANT_LIMIT_S) --survivors
