"""A Celery app for tests/live/test_recipes.py, with a broker that needs no server: kombu's
filesystem transport, its messages (and its exchanges) in the folder MEMGAP_CELERY_DIR. Its
one task makes, in the pool process that runs it, the burst of fork_worker.py (64 KiB buffers
from glibc's heap, all but the last freed, which keeps the heap's top from shrinking by itself)
and writes that process's PID to a file. Does not import memgap: the recipe under test brings it."""
import os

from celery import Celery


def make_app(folder):
    return Celery("celery_app", broker="filesystem://", broker_transport_options={
        "data_folder_in": folder, "data_folder_out": folder, "control_folder": folder, "store_processed": False,
        "polling_interval": 0.1})  # the worker looks for a message every 0.1 s, not every 1 s


app = make_app(os.environ.get("MEMGAP_CELERY_DIR", "."))
KEPT = []


@app.task(ignore_result=True)
def burst(pid_file):
    blocks = [bytearray(64 << 10) for _ in range(1200)]  # 75 MiB
    del blocks[:-1]
    KEPT.extend(blocks)
    with open(pid_file + ".part", "w") as f:
        f.write(str(os.getpid()))
    os.replace(pid_file + ".part", pid_file)
