# The two commands of the README: `make demo` and `make test`. Both create .venv when it is
# missing, install kraftlog with its native extensions and every extra, then run.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
DEPS_STAMP := $(VENV)/.deps-installed
ETCD_STAMP := $(VENV)/.etcd-tried
BUILD_STAMP := $(VENV)/.native-built
NATIVE_SOURCES := $(wildcard csrc/*.pyx csrc/*.pxd csrc/*.h) $(filter-out csrc/_%.c,$(wildcard csrc/*.c))
PYTEST := $(PY) -m pytest
# The native build runs without isolation (editable, in place), so the venv needs pyproject's
# [build-system] requires itself; read from there so the list is written once.
BUILD_REQUIRES = $(shell $(PYTHON) -c 'import tomllib; print(" ".join(repr(r) for r in tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')

.PHONY: install etcd demo test test-native test-twins lint bench sim clean

install: $(BUILD_STAMP) $(ETCD_STAMP)

# Third-party packages: only when pyproject.toml changes.
$(DEPS_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip $(BUILD_REQUIRES)
	$(PIP) install -q --no-build-isolation -e ".[test,bench,spark]"
	touch $@

# Our own native build: whenever a .pyx/.h/.c or setup.py changes (editable, in place).
$(BUILD_STAMP): $(DEPS_STAMP) setup.py $(NATIVE_SOURCES)
	$(PIP) install -q --no-build-isolation --no-deps -e .
	touch $@

# etcd, the peer of the raft.*_vs_etcd bench rows (bench/rows_etcd.py looks in .venv/bin, then PATH).
# Where etcd is missing and apt-get exists: Debian's etcd-server package, downloaded (no root needed)
# and only its binary unpacked into .venv/bin, so no system service is installed or started. Best
# effort: without apt, the package or a network, the rows say "etcd not installed" and install goes on.
# Tried once per .venv (the stamp), so a machine without a network does not wait on apt at every
# make; `make etcd` tries again.
ETCD := $(VENV)/bin/etcd
APT_GET_QUIET := apt-get -qq -o Acquire::Retries=0 -o Acquire::http::Timeout=20

$(ETCD_STAMP): $(DEPS_STAMP)
	@$(MAKE) --no-print-directory etcd
	@touch $@

etcd: $(DEPS_STAMP)
	@if command -v etcd >/dev/null 2>&1 || test -x $(ETCD) || ! command -v apt-get >/dev/null 2>&1; then exit 0; fi; \
	tmp=$$(mktemp -d); \
	fetch() { (cd $$tmp && $(APT_GET_QUIET) download etcd-server >/dev/null 2>&1); }; \
	if fetch || { test "$$(id -u)" = 0 && $(APT_GET_QUIET) update >/dev/null 2>&1 && fetch; }; then \
		dpkg-deb -x $$tmp/etcd-server_*.deb $$tmp/root && install -m 755 $$tmp/root/usr/bin/etcd $(ETCD) \
		&& echo "installed etcd (Debian etcd-server) as $(ETCD), the peer of the etcd bench rows"; \
	else \
		echo "etcd not installed (apt-get download etcd-server failed): the etcd bench rows will say so"; \
	fi; \
	rm -rf $$tmp

demo: install
	$(VENV)/bin/kraftlog demo

# Lint, then the whole suite on the native extensions (tests/conftest.py refuses to run if one
# did not load), then the twin-sensitive tests again on the pure-Python twins.
test: install lint test-native test-twins

# lint-imports checks the dependency rules (pyproject.toml's [tool.importlinter]). It reads the files
# under the root package's directory, and our folders become kraftlog.engine / .raft / .bench only
# through setup.py's package_dir, so it reads a tree of symlinks laid out as installed.
IMPORT_TREE := $(VENV)/import-tree

lint: install
	$(VENV)/bin/ruff check .
	rm -rf $(IMPORT_TREE) && mkdir -p $(IMPORT_TREE)/kraftlog
	ln -s $(CURDIR)/csrc/*.py $(IMPORT_TREE)/kraftlog/
	ln -s $(CURDIR)/engine $(CURDIR)/raft $(CURDIR)/bench $(IMPORT_TREE)/kraftlog/
	PYTHONPATH=$(IMPORT_TREE) $(VENV)/bin/lint-imports

test-native: install
	$(PYTEST) -q

test-twins: install
	KRAFTLOG_NO_EXTENSIONS=1 $(PYTEST) -q -m twin

bench: install
	$(PYTEST) -q bench --benchmark-only

# The deterministic Raft simulation at length: 10,000 seeds (CI's `make test` runs 2,000) plus the
# KIP-392 rack seeds; KRAFTLOG_SIM_SEED=N replays one seed verbosely.
sim: install
	KRAFTLOG_SIM_SEEDS=10000 KRAFTLOG_SIM_RACK_SEEDS=1000 $(PYTEST) -q tests/test_raft_sim.py

clean:
	rm -rf build dist *.egg-info csrc/_*.c csrc/*.so csrc/*.html
