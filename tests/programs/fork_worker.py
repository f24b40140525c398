"""A master that forks one worker, as gunicorn or a fork Pool does; the worker makes a burst of
64 KiB buffers (from glibc's heap), frees all but the last (which keeps the heap's top from
shrinking by itself), prints its PID and rests. Does not import memgap."""
import os
import sys
import time

pid = os.fork()
if pid == 0:
    burst = [bytearray(64 << 10) for _ in range(1200)]  # 75 MiB
    del burst[:-1]
    print(os.getpid(), flush=True)
    time.sleep(60)
    os._exit(0)
sys.stdin.readline()  # until the test is done
os.kill(pid, 9)
