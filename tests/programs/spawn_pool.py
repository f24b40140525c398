"""The multiprocessing recipe of docs/recipes.md, run by tests/live/test_recipes.py: the recipe's
lines (between the markers, also in the page), then a pool with the spawn start method whose
one child makes a burst (about 64 MiB of 100 kB blocks written, one in eight kept, the rest
left free in glibc's heap) and says its PID; the program then waits for a line on stdin while
the test reads the child."""
import multiprocessing
import os
import sys

KEPT = []


def burst(_):
    blocks = [b"x" * 100_000 for _ in range(640)]
    KEPT.extend(blocks[::8])
    del blocks
    return os.getpid()


if __name__ == "__main__":
    # recipe: start
    import memgap

    # before the pool starts its children: a child started by spawn (or forkserver) is a
    # new interpreter, and memgap's .pth starts its trimmer there from the environment
    os.environ.update(memgap.spawn_env(MEMGAP_TRIMMER="1"))
    multiprocessing.set_start_method("spawn")
    # recipe: end
    with multiprocessing.Pool(1) as pool:
        print(pool.apply(burst, (0,)), flush=True)
        sys.stdin.readline()
