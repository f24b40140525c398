#!/bin/sh
# Set up (see setup.sh) and run the whole test suite: every test (--no-skips), in four
# pytest-xdist workers (most tests wait on the programs they start), a module whose tests
# share a costly fixture kept on one worker (tests/conftest.py: SHARED_FIXTURES).
set -eu
cd "$(dirname "$0")/.."
sh scripts/setup.sh
exec .venv/bin/python -m pytest -q --no-skips -n 4 --dist loadgroup "$@"
