#!/bin/sh
# Set up (see setup.sh); lint and type-check (ruff and mypy, configured in pyproject.toml: ruff
# 0.1 s; mypy 7 s cold on 2 cores, 30 s beside a busy suite, under 1 s warm from .mypy_cache);
# then run the whole test suite: every test (--no-skips), in four pytest-xdist workers (most
# tests wait on the programs they start: on 2 cores 126-128 s with five or six, 132 s with four,
# 152 s with three, one after the other on one clone, in session 7; since session 8 the suite runs Go,
# Java and Node programs and labs on them, and five workers on 2 cores made timing flakes in fresh
# clones, so four), a file's tests on one worker (--dist
# loadfile: module fixtures that run labs and builds run once, not per worker; xdist 3.8's
# loadgroup did not group here), the tests that read a Rust program included (--cargo: setup.sh has built it).
# Bytecode is cached even where the environment says not to (PYTHONDONTWRITEBYTECODE): the suite
# starts about 700 Python processes, and without the cache each compiles memgap again, and each
# pytest worker rewrites every test module's asserts again (collection 6.7 s of CPU, 1.8 s cached).
#
# `scripts/test.sh --fast [PYTEST ARGS]`: the fast lane, tests/unit alone (the tests that start no
# process: tests/README.md), with the .venv already here and nothing else: no setup.sh, no apt, no
# root, no ruff or mypy. --no-skips there too: a unit test needs nothing it could skip for. In one
# process: 465-476 tests, 10-12.5 s of CPU, 10.9-28.0 s wall on the shared 2-core machine as its load
# went from 6 to 20. Two xdist workers took 3 s more CPU and were slower there: 8.1-30.1 s against
# 10.0-19.5 s in one process, six pairs run one after the other. Any other first argument (or none):
# the whole run above, as it was.
set -eu
unset PYTHONDONTWRITEBYTECODE
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--fast" ]; then
    shift
    if [ ! -x .venv/bin/python ]; then
        echo "scripts/test.sh --fast: no .venv here; make it once with: python3 -m venv .venv && .venv/bin/pip install -e '.[test]' (or sh scripts/setup.sh, which also installs what tests/live needs)" >&2
        exit 1
    fi
    exec .venv/bin/python -m pytest -q --no-skips tests/unit "$@"
fi
sh scripts/setup.sh
.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
exec .venv/bin/python -m pytest -q --no-skips --cargo -n 4 --dist loadfile --no-loadscope-reorder "$@"
