#!/bin/sh
# Set up (see setup.sh) and run the whole test suite.
set -eu
cd "$(dirname "$0")/.."
sh scripts/setup.sh
exec .venv/bin/python -m pytest -q --no-skips "$@"
