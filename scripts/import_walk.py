"""Print the walk of `memgap inspect PID`'s imports for a human: each module it reaches, breadth first,
with its floor (the pipeline's floors, from the command (7) down to the renderers (1) and the ground
(0): tests/unit/test_house.py says what they are and why), the imports that leave each module, and any that
climbs back to a higher floor (tests/unit/test_house.py fails on it). The graph and the floors are the
house test's own, read from its file, so the two cannot disagree.

    .venv/bin/python scripts/import_walk.py [MODULE]    (memgap.cli.inspect by default)
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("house", os.path.join(HERE, "..", "tests", "unit", "test_house.py"))
assert spec is not None and spec.loader is not None
house = importlib.util.module_from_spec(spec)
spec.loader.exec_module(house)

start = sys.argv[1] if len(sys.argv) > 1 else house.INSPECT
if start not in house.GRAPH:
    sys.exit(f"no module {start} under src/memgap")
edges = house.walk(start)
order = [start, *dict.fromkeys(b for _, b, _ in edges)]
print(f"The imports reachable from {start}: {len(order)} modules, {len(edges)} imports")
for module in order:
    out = [(b, line) for a, b, line in edges if a == module]
    print(f"[{house.floor(module)}] {module}")
    for target, line in out:
        climb = "  <- climbs back" if house.floor(target) > house.floor(module) else ""
        print(f"      line {line:>4} -> [{house.floor(target)}] {target}{climb}")
found = house.climbs(edges)
print(f"{len(found)} import{'s' if len(found) != 1 else ''} climb{'s' if len(found) == 1 else ''} to a higher floor")
for line in found:
    print("  " + line)
print("import cycles: " + ("none" if not house.cycles(house.GRAPH) else str(house.cycles(house.GRAPH))))
sys.exit(1 if found else 0)
