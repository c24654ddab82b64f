# phasewatch: set-up, demo, tests, benchmarks and the kernel module.
# Every target that runs Python first makes sure the environment is installed.

VENV      ?= .venv
PY        := $(VENV)/bin/python
APT_LIST  := packaging/apt-packages.txt
STAMP_APT := $(VENV)/.apt-installed
STAMP_PIP := $(VENV)/.pip-installed
EXAMPLE   := examples/synthetic-skylake.arrow

.PHONY: install demo test pytest bench kmod kmod-test clean

install: $(STAMP_PIP)

$(STAMP_APT): $(APT_LIST)
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		$$(grep -v '^\s*#' $(APT_LIST))
	/usr/bin/python3 -m venv --system-site-packages $(VENV)
	touch $@

# --system-site-packages lets the venv see Debian's python-perf bindings (import perf).
$(STAMP_PIP): $(STAMP_APT) setup.cfg pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dashboards]'
	$(PY) -c "import perf, numba, numpy, zmq, prometheus_client, psutil, pyarrow"
	touch $@

$(EXAMPLE): tools/make_example_trace.py | $(STAMP_PIP)
	$(PY) tools/make_example_trace.py --out $@

demo: install $(EXAMPLE)
	$(VENV)/bin/phasewatch replay $(EXAMPLE) --labels examples/synthetic-skylake.labels.json

pytest: install
	$(VENV)/bin/pytest

test: pytest kmod-test

bench: install
	$(PY) benchmarks/bench_replay.py

kmod:
	$(MAKE) -C kmod

kmod-test:
	$(MAKE) -C kmod test

clean:
	rm -rf $(VENV) build *.egg-info
	$(MAKE) -C kmod clean
