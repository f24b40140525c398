"""A load tool, as users have them: N requests from C concurrent clients, then one
line with the rate ("123.4 req/s").

    python load.py PORT REQUESTS CONCURRENCY
"""
import sys
import threading
import time
import urllib.request

port, total, concurrency = (int(a) for a in sys.argv[1:4])
left = iter(range(total))
lock = threading.Lock()


def client() -> None:
    while True:
        with lock:
            if next(left, None) is None:
                return
        for _attempt in range(50):  # the service may still be starting
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30).read()
                break
            except OSError:
                time.sleep(0.1)


started = time.perf_counter()
threads = [threading.Thread(target=client) for _ in range(concurrency)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"{total / (time.perf_counter() - started):.1f} req/s")
