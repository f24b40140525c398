"""A load driver, as users write them: start the server as a child, wait until it
answers, send bursts of concurrent requests with 1 s rests, read the server's RSS
after a last rest (a line "rest RSS PSS_SERVER PSS_DRIVER", in bytes, appended to
argv[1]: PSS splits shared pages among their sharers), then stop it.

    python drive.py READINGS_FILE LAST_REST_SECONDS
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def pss(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:"))


def burst(port: int, n: int) -> None:
    def one() -> None:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30).read()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


port = free_port()
server = subprocess.Popen([sys.executable, "-m", "uvicorn", "burst_app:app", "--app-dir", HERE,
                           "--port", str(port), "--log-level", "warning"])
deadline = time.time() + 30
while time.time() < deadline:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        time.sleep(0.05)
for k in range(3):
    if k:
        time.sleep(1.0)
    burst(port, 8)
time.sleep(float(sys.argv[2]))
with open(sys.argv[1], "a") as out:
    out.write(f"rest {rss(server.pid)} {pss(server.pid)} {pss(os.getpid())}\n")
server.send_signal(signal.SIGTERM)
code = server.wait(timeout=30)
if code not in (0, -signal.SIGTERM):  # uvicorn shuts down, then dies of the signal it caught
    print(f"drive.py: the server exited with {code}", file=sys.stderr)
    sys.exit(1)
