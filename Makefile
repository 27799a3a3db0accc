# posgeom: two commands build the executed book and run the tests (see README.md).
#   make book POSGEOM_DATA_DIR=/path/to/data     environment (.venv) + strict, executed book in _build/html
#   make test POSGEOM_DATA_DIR=/path/to/data     the book (cached) + unit, property and notebook tests
#   make pdf / make student                       the PDF edition / the student notebooks (README, Editions)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

export POSGEOM_DATA_DIR
export POSGEOM_CACHE_DIR ?= $(CURDIR)/.cache/posgeom
PYTEST_ARGS ?=

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
	POSGEOM_PROGRESS=0 POSGEOM_REQUIRE_BOOK=1 $(PY) -m pytest tests --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg $(PYTEST_ARGS)

# re-execute every chapter with the smoke profile into tests/notebooks/*.ipynb (the nbval references)
references: env
	POSGEOM_PROGRESS=0 $(PY) scripts/make_references.py

# the student edition: student/<chapter>.ipynb, solutions removed, outputs cleared, smoke profile
student: env
	$(PY) scripts/make_student.py

# the whole book as one PDF (_build/pdf/book.pdf): single-page HTML printed by headless Chromium
pdf: book
	$(PY) scripts/make_pdf.py

bench: env
	POSGEOM_PROGRESS=0 $(PY) benchmarks/bench_marginals.py

clean:
	rm -rf _build .cache
