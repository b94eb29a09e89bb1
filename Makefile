# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
CONF   ?= larbin.conf

.PHONY: run test test-slow bench bench-small bench-hosts bench-polite bench-all lint typecheck docs clean

# larbinpy needs Python 3.11 or later: say so before making a venv that pip would then refuse
PY_OK := import sys; sys.exit(sys.version_info < (3, 11))

# A venv left by a Python older than that (an earlier try) would fail the same way on every
# run: it is made again.
ifneq ($(wildcard $(PY)),)
ifneq ($(shell $(PY) -c '$(PY_OK)' 2>/dev/null && echo ok),ok)
$(info $(VENV) was made by a Python older than 3.11 ($(shell $(PY) -V 2>&1)): making it again)
$(shell rm -rf $(VENV))
endif
endif

$(VENV)/.installed: pyproject.toml setup.py larbinpy/links/_tagscan.c larbinpy/links/_plainlinks.c \
    larbinpy/frontier/_seenbits.c
	@$(PYTHON) -c '$(PY_OK)' 2>/dev/null || { echo "larbinpy needs Python 3.11 or later;" \
	  "$(PYTHON) is $$($(PYTHON) -V 2>&1). Name another: make $(MAKECMDGOALS) PYTHON=python3.12" >&2; \
	  exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

# One stamp per extra (pyproject.toml): `make run` needs the demo's, `make bench*` the bench's.
$(VENV)/.installed-%: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[$*]'
	touch $@

## run: crawl the local demo web (served on loopback by the demo itself) with the shipped larbin.conf
run: $(VENV)/.installed-demo
	$(PY) -m larbinpy.demo.demoweb --crawler-conf $(CONF) -- $(VENV)/bin/larbinpy -c $(CONF) --scratch

# pywb, for the replay test (tests/replay.py), pins redis 2.10 and brings brotlipy, which shadows
# the brotli module: it cannot share the test venv, so it gets one of its own
PYWB_VENV ?= .venv-pywb
$(PYWB_VENV)/.installed:
	test -x $(PYWB_VENV)/bin/python || $(PYTHON) -m venv $(PYWB_VENV)
	$(PYWB_VENV)/bin/pip install -q 'pywb>=2.10,<3'
	touch $@

# py-wacz, whose `wacz validate` the WACZ test runs (tests/test_wacz.py): it brings frictionless
# and some fifty packages no other test needs, so it too gets a venv of its own
WACZ_VENV ?= .venv-wacz
$(WACZ_VENV)/.installed:
	test -x $(WACZ_VENV)/bin/python || $(PYTHON) -m venv $(WACZ_VENV)
	$(WACZ_VENV)/bin/pip install -q 'wacz>=0.5,<0.7'
	touch $@

# ReplayWeb.page (npm's replaywebpage: its ui.js and service worker), for the test that opens a
# WACZ in it in Chromium (tests/test_wacz.py); without npm the test skips and says why
RWP_DIR ?= .replaywebpage
RWP_VERSION ?= 2.5.3
$(RWP_DIR)/.installed:
	@mkdir -p $(RWP_DIR)
	@if command -v npm >/dev/null && (cd $(RWP_DIR) && npm pack -q replaywebpage@$(RWP_VERSION) \
	    >/dev/null && tar xzf replaywebpage-$(RWP_VERSION).tgz && rm replaywebpage-$(RWP_VERSION).tgz); \
	then touch $@; else echo "replaywebpage could not be fetched with npm: its test will skip"; fi

# The suite's tests mostly wait on real servers and processes: 4 at a time on 2 cores
TEST_PROCS ?= 4

## test: ruff, mypy over larbinpy/ (its settings: pyproject.toml), then the whole suite (< 5 minutes)
test: $(VENV)/.installed-test $(PYWB_VENV)/.installed $(WACZ_VENV)/.installed $(RWP_DIR)/.installed
	$(VENV)/bin/ruff check larbinpy tests
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -n $(TEST_PROCS)

## test-slow: the long checks kept out of `make test`
test-slow: $(VENV)/.installed-test $(PYWB_VENV)/.installed $(WACZ_VENV)/.installed
	$(PY) -m pytest -q -m slow

## bench: crawl a synthetic local web and print pages/s, CPU per page, RSS, ratio to a bare fetch loop
bench: $(VENV)/.installed-bench
	$(VENV)/bin/larbinpy bench

## bench-small: 50 hosts x 80 pages of 10 kB with 20 links each; five crawl/floor pairs, the median shown
bench-small: $(VENV)/.installed-bench
	$(VENV)/bin/larbinpy bench --hosts 50 --pages 80 --page-bytes 10000 --links 20 --repeat 5

## bench-hosts: 10,000 hosts x 5 pages (one DNS query and one robots.txt fetch per host)
bench-hosts: $(VENV)/.installed-bench
	$(VENV)/bin/larbinpy bench --hosts 10000 --pages 5

## bench-polite: 500 hosts, waitDuration 1, one connection per host (ideal: 500 pages/s)
bench-polite: $(VENV)/.installed-bench
	$(VENV)/bin/larbinpy bench --hosts 500 --pages 10 --per-host 1 --wait 1 --no-floor

## bench-all: the default, --output none, bench-small, bench-hosts and bench-polite, one after the other
bench-all: bench bench-small bench-hosts bench-polite
	$(VENV)/bin/larbinpy bench --output none

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check larbinpy tests

## typecheck: mypy over larbinpy/ alone (`make test` runs it too)
typecheck: $(VENV)/.installed-test
	$(VENV)/bin/mypy

## docs: regenerate docs/configuration.md from the key table in larbinpy/config.py
docs: $(VENV)/.installed
	$(PY) -m larbinpy.config --markdown > docs/configuration.md.tmp
	mv docs/configuration.md.tmp docs/configuration.md

clean:
	rm -rf $(VENV) $(PYWB_VENV) $(WACZ_VENV) $(RWP_DIR) larbin-state save .pytest_cache .mypy_cache
