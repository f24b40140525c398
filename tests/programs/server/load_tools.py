"""What the load drivers beside this file share (standard library only, no memgap): a free port, a
process's VmRSS, PSS and CPU time from /proc, and a burst of concurrent requests."""
import os
import socket
import threading
import urllib.request


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


def cpu(pid: int) -> float:
    """The process's CPU seconds so far, user and system (/proc/PID/stat's utime and stime)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def burst(port: int, n: int) -> None:
    def one() -> None:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30).read()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
