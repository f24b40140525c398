"""``python -m memgap.scenarios.native [NAME]``: build a native scenario, print its path."""
import sys

from memgap.scenarios.native import build

print(build(sys.argv[1] if len(sys.argv) > 1 else "blockingpool"))
