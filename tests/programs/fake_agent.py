"""A process that pretends to have memgap's agent, as any user on the machine could: started with
an LD_PRELOAD naming memgap (a path that does not exist: nothing is preloaded) and
MEMGAP_AGENT_DIR, it listens on the socket the agent would, and answers badly.

    fake_agent.py MODE [MARK]   (prints "ready PID" once its socket listens, then serves until killed;
                                 MARK is not read: it makes the command line unique for --match)

MODE: good (a credible reply), huge (a reply without end), slow (one byte a second, forever),
rss (RSS of 10^15 bytes), negative (in-use bytes -5), nan (a NaN figure), chown (the socket
handed to uid 65534), not-peer (a child of it listens, not it), symlink (the socket a symlink
to a socket of its child's). Does not import memgap.
"""
import os
import socket
import sys
import time

MODE = sys.argv[1]
FOLDER = os.environ["MEMGAP_AGENT_DIR"]
TARGET = os.getpid()
PATH = os.path.join(FOLDER, f"agent-{TARGET}.sock")


def own_rss():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def reply(rss=None, uordblks=512 << 10, released="0"):
    rss = own_rss() if rss is None else rss
    return (f"memgap-agent 1\npid {TARGET}\nallocator glibc\nmalloc_from /lib/x86_64-linux-gnu/libc.so.6\n"
            f"rss {rss}\ntrimmer off every=0.000 trims=0 checks=0 released={released} seconds=0.000000\n"
            f"mallinfo2 arena={1 << 20} ordblks=10 smblks=0 hblks=0 hblkhd=0 usmblks=0 fsmblks=0 "
            f"uordblks={uordblks} fordblks={(1 << 20) - uordblks} keepcost=4096\nend\n").encode()


def answer(conn):
    conn.recv(64)  # the question
    if MODE == "huge":
        conn.sendall(b"memgap-agent 1\n")
        while True:
            conn.sendall(b"x" * 65535 + b"\n")
    elif MODE == "slow":
        for byte in b"memgap-agent 1\n" * 10 ** 6:
            conn.sendall(bytes([byte]))
            time.sleep(1)
    elif MODE == "rss":
        conn.sendall(reply(rss=10 ** 15))
    elif MODE == "negative":
        conn.sendall(reply(uordblks=-5))
    elif MODE == "nan":
        conn.sendall(reply(released="nan"))
    else:
        conn.sendall(reply())


def serve(path, after_listen=None):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(8)
    if after_listen is not None:
        after_listen()
    while True:
        conn, _ = listener.accept()
        try:
            answer(conn)
        except OSError:
            pass  # the client hung up: what memgap should do to a bad agent
        finally:
            conn.close()


def main():
    if MODE in ("not-peer", "symlink"):
        read, write = os.pipe()
        if os.fork() == 0:  # the child: another process of the same user, listening for its parent
            where = PATH if MODE == "not-peer" else os.path.join(FOLDER, "elsewhere.sock")
            serve(where, lambda: os.write(write, b"x"))
        os.read(read, 1)
        if MODE == "symlink":
            os.symlink(os.path.join(FOLDER, "elsewhere.sock"), PATH)
        print("ready", TARGET, flush=True)
        while True:
            time.sleep(60)
    after = (lambda: os.chown(PATH, 65534, 65534)) if MODE == "chown" else None

    def ready():
        if after is not None:
            after()
        print("ready", TARGET, flush=True)

    serve(PATH, ready)


main()
