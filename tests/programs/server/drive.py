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
import time

from load_tools import burst, free_port, pss, rss  # beside this script

HERE = os.path.dirname(os.path.abspath(__file__))

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
