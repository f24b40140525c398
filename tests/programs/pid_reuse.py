"""A real PID reuse for `memgap serve-metrics`, run as the first process of a PID namespace of its
own (``unshare --pid --fork --mount-proc python pid_reuse.py``): only its own processes take
PIDs there, so the next one can be made to take a PID just freed (ns_last_pid, as root).

Starts a target (``sleep``) and ``memgap serve-metrics --refresh 0 --port 0 TARGET``, prints
"serving PID URL"; then on each stdin line: "reuse" -> kills the target, makes a new ``sleep``
take its PID, prints "reused PID"; "log" -> prints what serve-metrics wrote on stderr, then
"end". Does not import memgap (it runs it).
"""
import signal
import subprocess
import sys
import threading
import time

target = subprocess.Popen(["sleep", "600"])
server = subprocess.Popen([sys.executable, "-m", "memgap", "serve-metrics", "--refresh", "0", "--port", "0",
                           str(target.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
logged = []
threading.Thread(target=lambda: logged.extend(iter(server.stderr.readline, "")), daemon=True).start()
line = server.stdout.readline()
if not line.startswith("memgap: serving "):
    print("failed", server.wait(), "".join(logged), flush=True)
    sys.exit(1)
print("serving", target.pid, line.split()[2], flush=True)

for command in sys.stdin:
    if command.strip() == "reuse":
        pid = target.pid
        target.send_signal(signal.SIGKILL)
        target.wait()
        with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
            fh.write(str(pid - 1))
        target = subprocess.Popen(["sleep", "600"])
        print("reused" if target.pid == pid else "missed", target.pid, flush=True)
    elif command.strip() == "log":
        waited = 0.0  # the server's line may still be on its way through the pipe and the reader thread
        while not logged and waited < 5:
            time.sleep(0.05)
            waited += 0.05
        for text in logged:
            print(text, end="")
        print("end", flush=True)
