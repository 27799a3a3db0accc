# posgeom: two commands build the executed book and run the tests (see README.md).
#   make book POSGEOM_DATA_DIR=../shared/data    environment (.venv) + strict, executed book in _build/html
#   make test POSGEOM_DATA_DIR=../shared/data    the book (cached) + unit, property and notebook tests
#   make pdf / make student                       the PDF edition / the student notebooks (docs/building.md)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

# The two folders are made absolute here, once, against the folder make runs in, whether they come from the
# make command line or the environment: the chapters execute in notebooks/, where a relative path such as
# ../shared/data names another folder. A leading ~ is expanded. An empty or unset POSGEOM_DATA_DIR means
# "load the corpora from the Hugging Face hub" and stays empty.
posgeom_abspath = $(abspath $(patsubst ~/%,$(HOME)/%,$(patsubst ~,$(HOME),$(1))))
ifneq ($(strip $(POSGEOM_DATA_DIR)),)
override POSGEOM_DATA_DIR := $(call posgeom_abspath,$(strip $(POSGEOM_DATA_DIR)))
endif
POSGEOM_CACHE_DIR ?= $(CURDIR)/.cache/posgeom
ifneq ($(strip $(POSGEOM_CACHE_DIR)),)
override POSGEOM_CACHE_DIR := $(call posgeom_abspath,$(strip $(POSGEOM_CACHE_DIR)))
endif
export POSGEOM_DATA_DIR POSGEOM_CACHE_DIR
# the slowest tests are printed at the end of every run (what #45 measures); PYTEST_ARGS= turns it off
PYTEST_ARGS ?= --durations=15
# the suite on both cores (pytest-xdist); each test file stays on one worker, so a notebook's cells run in order
TEST_WORKERS ?= 2

.PHONY: env book test references student pdf bench clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m pip check
	touch $@

env: $(VENV)/.installed

book: env
	PY=$(PY) bash scripts/build_book.sh

test: book
	POSGEOM_PROGRESS=0 POSGEOM_REQUIRE_BOOK=1 $(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadfile --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg $(PYTEST_ARGS)

# re-execute every chapter with the smoke profile into tests/notebooks/*.ipynb (the nbval references)
references: env
	POSGEOM_PROGRESS=0 $(PY) scripts/make_references.py

# the student edition: student/<chapter>.ipynb, solutions removed, outputs cleared, class profile
student: env
	$(PY) scripts/make_student.py

# the whole book as one PDF (_build/pdf/book.pdf): single-page HTML printed by headless Chromium
pdf: book
	$(PY) scripts/make_pdf.py

bench: env
	POSGEOM_PROGRESS=0 $(PY) benchmarks/bench_marginals.py

clean:
	rm -rf _build .cache
