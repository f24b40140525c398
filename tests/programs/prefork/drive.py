"""A driver of a preforked server, as users write them (it does not import memgap): start
gunicorn --preload with 4 sync workers serving table_app on a loopback socket, send
requests with urllib from 4 threads, then rest.

    python drive.py hold [FORK_MAPS_DIR]   # prints "size BYTES TRACKED_ROWS" (table_app's /size),
                                          # sends requests until each worker has served 2, prints
                                          # "ready MASTER WORKER..." and rests until killed
                                          # (with FORK_MAPS_DIR: fork_maps.py keeps the master's
                                          # maps at each fork there)
    python drive.py REQUESTS REST_SECONDS  # one request that waits for the server to be up, then
                                          # REQUESTS requests, prints "requests per second: X",
                                          # rests (0.7 of the way: "rest pss BYTES", smaps_rollup's
                                          # Pss summed over itself and gunicorn's tree, and "rest
                                          # workers private BYTES", the workers' Private_Clean and
                                          # Private_Dirty summed), then stops gunicorn (SIGTERM) and exits
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = 4


def start(maps_dir):
    """(gunicorn's Popen, port): gunicorn listens on a socket this process bound (fd://)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    cmd = [sys.executable, "-m", "gunicorn", "--preload", "-w", str(WORKERS), "-k", "sync",
           "--bind", f"fd://{sock.fileno()}", "--log-level", "warning", "--chdir", HERE]
    env = dict(os.environ)
    if maps_dir:
        cmd += ["-c", os.path.join(HERE, "fork_maps.py")]
        env["FORK_MAPS_DIR"] = maps_dir
    server = subprocess.Popen([*cmd, "table_app:app"], pass_fds=[sock.fileno()], env=env)
    port = sock.getsockname()[1]
    sock.close()  # gunicorn holds its own copy; connections queue until a worker accepts
    return server, port


def get(port, path):
    """The answer's words; its last is the serving worker's PID."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=120) as r:
        return r.read().decode().split()


def send(port, count, served):
    """``count`` requests from 4 threads; ``served`` counts them by worker PID."""
    numbers = iter(range(count))
    lock = threading.Lock()

    def loop():
        while True:
            with lock:
                n = next(numbers, None)
            if n is None:
                return
            pid = int(get(port, f"/row/{n * 7919}")[-1])
            with lock:
                served[pid] += 1

    threads = [threading.Thread(target=loop) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def hold(port, server):
    print("size", *get(port, "/size")[:2], flush=True)  # asked first: counting reads every row
    served = Counter()
    while len(served) < WORKERS or min(served.values()) < 2:
        if sum(served.values()) > 400:
            sys.exit(f"drive.py: workers served {dict(served)}")
        send(port, 8, served)
    print("ready", server.pid, *sorted(served), flush=True)
    time.sleep(600)


def rollup(pid, *names):
    """The named fields of the process's smaps_rollup, summed, in bytes."""
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        return sum(int(line.split()[1]) * 1024 for line in fh if line.split(":")[0] in names)


def tree_pss(master):
    """(Pss summed over this process, gunicorn's master and its workers; the workers' private
    bytes summed), from smaps_rollup, in bytes."""
    with open(f"/proc/{master}/task/{master}/children") as fh:
        workers = [int(pid) for pid in fh.read().split()]
    pss = sum(rollup(pid, "Pss") for pid in [os.getpid(), master, *workers])
    return pss, sum(rollup(pid, "Private_Clean", "Private_Dirty") for pid in workers)


def main():
    mode = sys.argv[1]
    server, port = start(sys.argv[2] if mode == "hold" and sys.argv[2:] else None)
    try:
        if mode == "hold":
            hold(port, server)
            return
        get(port, "/row/0")  # up: the table is built and a worker answers
        began = time.monotonic()
        send(port, int(mode), Counter())
        print(f"requests per second: {int(mode) / (time.monotonic() - began):.2f}", flush=True)
        time.sleep(float(sys.argv[2]) * 0.7)
        pss, private = tree_pss(server.pid)
        print("rest pss", pss, flush=True)
        print("rest workers private", private, flush=True)
        time.sleep(float(sys.argv[2]) * 0.3)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
