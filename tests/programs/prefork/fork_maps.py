"""A gunicorn config file for the tests' witness (not a remedy): the master's own
/proc/self/maps right before each fork, kept as DIR/PID.maps under the worker's PID
(DIR: $FORK_MAPS_DIR), so the test knows exactly which ranges the master mapped when
that worker was forked."""
import os

_DIR = os.environ["FORK_MAPS_DIR"]


def pre_fork(server, worker):
    with open("/proc/self/maps") as src, open(os.path.join(_DIR, f"age-{worker.age}.maps"), "w") as dst:
        dst.write(src.read())


def post_fork(server, worker):
    os.rename(os.path.join(_DIR, f"age-{worker.age}.maps"), os.path.join(_DIR, f"{os.getpid()}.maps"))
