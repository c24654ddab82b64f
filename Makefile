# phasewatch: set-up, demo, tests, benchmarks and the kernel module.
# Every target that runs Python first makes sure the environment is installed.

VENV      ?= .venv
PY        := $(VENV)/bin/python
APT_LIST  := packaging/apt-packages.txt
STAMP_APT := $(VENV)/.apt-installed
STAMP_PIP := $(VENV)/.pip-installed
EXAMPLE   := examples/synthetic-skylake
BUILD     := build

.PHONY: install install-system install-system-files demo test pytest bench kmod kmod-test clean mutants

AOT       := agent/core/_kernels_aot.json

SPEEDSCOPE := $(VENV)/node_modules/speedscope/dist/release/index.html

SHARE     := $(VENV)/share
LAUNCHER  := $(VENV)/bin/phasewatchd
MANPAGES  := $(SHARE)/man/man1/phasewatch.1

install: $(STAMP_PIP) $(AOT) $(SPEEDSCOPE) $(MANPAGES) $(LAUNCHER)

$(STAMP_APT): $(APT_LIST)
	apt-get update -q -o DPkg::Lock::Timeout=900
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=900 \
		$$(grep -v '^\s*#' $(APT_LIST))
	/usr/bin/python3 -m venv --system-site-packages $(VENV)
	touch $@

# --system-site-packages lets the venv see Debian's python-perf bindings (import perf).
$(STAMP_PIP): $(STAMP_APT) setup.cfg pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dashboards,docs]'
	$(PY) -c "import perf, numba, numpy, zmq, prometheus_client, psutil, pyarrow"
	touch $@

# speedscope, the profile viewer the tests open a phase's pprof profile in
# (npm, into the venv; headless Chromium shows it).
$(SPEEDSCOPE): $(STAMP_APT)
	command -v npm >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends -o DPkg::Lock::Timeout=900 npm
	npm install -q --prefix $(VENV) --no-audit --no-fund --no-save speedscope@1.25.0
	touch $@

# The pipeline's kernels compiled ahead of time (agent/core/kernels.py), so that a
# command starts without numba's compiler; rebuilt when any source changes
# (until then the kernels run just in time).  Bytecode is compiled too: where
# PYTHONDONTWRITEBYTECODE is set, every start would compile the sources again.
$(AOT): $(STAMP_PIP) $(wildcard agent/*.py agent/*/*.py collectors/*.py collectors/*.c)
	$(PY) -m phasewatch.cli.aot_build
	$(PY) -m compileall -q agent collectors

# The `phasewatchd` command: a launcher that starts the daemon's interpreter
# with SIGHUP blocked, so that a reload asked for while Python starts is kept
# for later instead of ending the process (agent/cli/phasewatchd_launcher.c).
# On x86-64 it is built without a C library, whose start-up would leave a
# window of its own.
LAUNCHER_SRC    := agent/cli/phasewatchd_launcher.c
LAUNCHER_CFLAGS := -Os -Wall -static $(if $(filter x86_64,$(shell uname -m)),-nostdlib \
	-fno-stack-protector -fno-asynchronous-unwind-tables -fno-tree-loop-distribute-patterns)
build_launcher   = $(CC) $(LAUNCHER_CFLAGS) -DPYTHON='"$(1)"' -o $(2) $(LAUNCHER_SRC)

$(LAUNCHER): $(STAMP_PIP) $(LAUNCHER_SRC)
	$(call build_launcher,$(abspath $(PY)),$@)

# A man page per command and bash completion, generated from the parsers, in
# the venv's share/ (man and bash-completion find them from .venv/bin on PATH).
$(MANPAGES): $(STAMP_PIP) $(wildcard agent/cli/*.py)
	$(PY) -m phasewatch.cli.manpages $(SHARE)

# The daemon as a system service: a venv of its own in PREFIX (a checkout under
# /root or /home is hidden from the service by ProtectHome), the unit, the
# default config (an existing one is kept) and the modules to load at boot.
# `make install` stays the developer set-up in .venv.
PREFIX    ?= /opt/phasewatch
SYSCONF   ?= /etc

install-system: install install-system-files
	/usr/bin/python3 -m venv --system-site-packages $(DESTDIR)$(PREFIX)
	$(DESTDIR)$(PREFIX)/bin/pip install -q '.[docs]'
	$(call build_launcher,$(PREFIX)/bin/python,$(DESTDIR)$(PREFIX)/bin/phasewatchd)
	$(DESTDIR)$(PREFIX)/bin/python -m phasewatch.cli.aot_build
	$(DESTDIR)$(PREFIX)/bin/python -m phasewatch.cli.manpages $(DESTDIR)$(PREFIX)/share
	if [ -z "$(DESTDIR)" ] && command -v systemctl >/dev/null; then systemctl daemon-reload; fi

install-system-files:
	install -d $(DESTDIR)$(SYSCONF)/systemd/system $(DESTDIR)$(SYSCONF)/phasewatch \
		$(DESTDIR)$(SYSCONF)/modules-load.d
	sed 's|/opt/phasewatch|$(PREFIX)|g' systemd/phasewatchd.service \
		> $(DESTDIR)$(SYSCONF)/systemd/system/phasewatchd.service
	test -e $(DESTDIR)$(SYSCONF)/phasewatch/phasewatch.toml || \
		install -m 0644 systemd/phasewatch.toml $(DESTDIR)$(SYSCONF)/phasewatch/phasewatch.toml
	install -m 0644 systemd/modules-load.d/phasewatch.conf $(DESTDIR)$(SYSCONF)/modules-load.d/

# The demo: the bundled synthetic trace converted and replayed with both
# detectors, then a real program (A, B, then A again) watched live.
demo: install
	mkdir -p $(BUILD)
	$(VENV)/bin/phasewatch probe
	$(VENV)/bin/phasewatch convert $(EXAMPLE).csv $(BUILD)/synthetic-skylake.arrow
	$(VENV)/bin/phasewatch replay $(BUILD)/synthetic-skylake.arrow --detector vpf --labels $(EXAMPLE).labels.json
	$(VENV)/bin/phasewatch replay $(BUILD)/synthetic-skylake.arrow --detector vpf-ip \
		--labels $(EXAMPLE).labels.json --output $(BUILD)/synthetic-skylake.jsonl
	$(VENV)/bin/phasewatch report $(BUILD)/synthetic-skylake.arrow --detector vpf-ip \
		--labels $(EXAMPLE).labels.json --out $(BUILD)/report
	$(MAKE) -s -C tests/workloads OUT=$(CURDIR)/$(BUILD)
	$(VENV)/bin/phasewatch run --detector vpf-ip --record $(BUILD)/abab.arrow -- $(BUILD)/abab 1.5

pytest: install
	$(VENV)/bin/pytest

test: pytest kmod-test

# Mutation testing with cosmic-ray over core/, formats/ and report/diff.py, each
# module against its fast test files (tools/mutants.py; docs/testing.md has
# the score).  Hours for every module: MODULES=core/codemap picks some, and a
# session already run resumes.  At the lowest priority: the host is shared.
MODULES ?=
mutants: install
	nice -n 19 $(PY) tools/mutants.py $(MODULES)

bench: install
	$(PY) benchmarks/bench_whole.py
	$(PY) benchmarks/bench_replay.py
	$(PY) benchmarks/bench_sampler.py
	$(PY) benchmarks/bench_ticks.py
	$(PY) benchmarks/bench_run.py
	$(PY) benchmarks/bench_daemon.py --mode live

# Grafana dashboards, built from agent/dashboards/ with grafana-foundation-sdk.
# The emitted JSON is committed; tests/test_dashboards.py fails when it is stale.
.PHONY: dashboards
dashboards: install
	$(PY) -m phasewatch.dashboards grafana/dashboards

# The option reference docs/commands.md, rendered from the commands' parsers
# (as the man pages are). It is committed; tests/test_docs.py fails when stale.
.PHONY: docs
docs: install
	$(PY) -m phasewatch.cli.manpages --markdown docs/commands.md

# The picture in docs/pprof.md: phase 0 (region A) of the A/B/A program, cut out of the
# run's pprof profile by Go's pprof and opened in speedscope.
docs/phase-in-speedscope.png: install
	mkdir -p $(BUILD)
	$(MAKE) -s -C tests/workloads OUT=$(CURDIR)/$(BUILD)
	$(VENV)/bin/phasewatch run --detector vpf-ip --interval-samples 200 \
		--pprof $(BUILD)/abab.pb.gz -- $(BUILD)/abab 1.5
	go tool pprof -tagfocus=phase=0 -proto $(BUILD)/abab.pb.gz > $(BUILD)/abab-phase0.pb.gz
	$(PY) tools/speedscope_shot.py $(BUILD)/abab-phase0.pb.gz $@

# pprof's message classes, generated from agent/formats/pprof_profile.proto and
# committed (a pip install needs no protoc); tests/test_pprof.py fails when stale.
.PHONY: pprof-proto
pprof-proto:
	protoc --proto_path=agent/formats --python_out=agent/formats pprof_profile.proto

kmod:
	$(MAKE) -C kmod

kmod-test:
	$(MAKE) -C kmod test

clean:
	rm -rf $(VENV) $(BUILD) *.egg-info
	$(MAKE) -C kmod clean
