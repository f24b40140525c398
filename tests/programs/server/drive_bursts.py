"""A load driver for thread_server.py (or SERVER beside it: async_server.py), as users write them
(standard library only, no memgap): start the server as a child, wait until it answers, send BURSTS
bursts of CONCURRENCY concurrent requests, each followed by a rest of REST seconds, and read the
server's RSS from /proc/PID/status after each rest; then stop the server. It appends to READINGS a
line "rest BYTES" per rest, one "burst SECONDS CPU" per burst (its time, and the CPU seconds the
server and the driver used in it), and one "work SECONDS" (the bursts' time, without the rests).

    python drive_bursts.py READINGS [BURSTS [REST [CONCURRENCY [SERVER]]]]
"""
import os
import signal
import socket
import subprocess
import sys
import time

from load_tools import burst, cpu, free_port, rss  # beside this script

HERE = os.path.dirname(os.path.abspath(__file__))

readings = sys.argv[1]
bursts = int(sys.argv[2]) if len(sys.argv) > 2 else 4
rest = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 8
script = sys.argv[5] if len(sys.argv) > 5 else "thread_server.py"
port = free_port()
server = subprocess.Popen([sys.executable, os.path.join(HERE, script), str(port)])
deadline = time.time() + 30
while time.time() < deadline:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        time.sleep(0.05)
lines = []
work = 0.0
for _ in range(bursts):
    began, cpu_began = time.perf_counter(), cpu(server.pid) + sum(os.times()[:2])
    burst(port, concurrency)
    took = time.perf_counter() - began
    work += took
    lines.append(f"burst {took:.4f} {cpu(server.pid) + sum(os.times()[:2]) - cpu_began:.2f}")
    time.sleep(rest)
    lines.append(f"rest {rss(server.pid)}")
with open(readings, "a") as out:
    out.write("\n".join([*lines, f"work {work:.4f}"]) + "\n")
server.send_signal(signal.SIGTERM)
code = server.wait(timeout=30)
if code != 0:
    print(f"drive_bursts.py: the server exited with {code}", file=sys.stderr)
    sys.exit(1)
