"""``inspect --deep`` and ``--trim`` where malloc is jemalloc (issue 12): its own mallctl called
through gdb, checked against what the process itself says, at the same moment.

The programs: Debian's redis-server (libjemalloc.so.2), checked against its ``INFO memory``
(allocator_allocated, _active, _resident: jemalloc's stats.* as Redis reads them), and a C
program with Debian's libjemalloc.a linked in (``programs/je_stats.c``), checked against the
figures it prints from its own mallctl; stripped, it is refused. The same program linked against
a jemalloc whose API is renamed je_* (conftest's ``je_prefixed_exe``), with -rdynamic and stripped as
Redis ships: glibc's malloc beside it, both read in one attach and both trimmed, each against the
program's own figures (its mallctl and glibc's mallinfo2) and VmRSS; without -rdynamic it exports
nothing and its jemalloc is named and left unread. And a Rust program with tikv-jemallocator
(``programs/rjem``, marked ``cargo``: its API under ``_rjem_``, statistics on), which prints its
own mallctl figures in the same form.

Redis runs with ``MALLOC_CONF=dirty_decay_ms:60000``: with jemalloc's default 10 s decay its
background thread purges the deleted keys' pages while the test reads, and the figures the
test compares would move under it; over 60 s the first seconds purge well under 1%.
"""
import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from helpers import MiB, OwnFigures, memgap, vmrss

KEYS, DELETED = 200_000, 150_000
VALUE = b"v" * 100


def _command(*words):
    out = b"*%d\r\n" % len(words)
    for word in words:
        word = word if isinstance(word, bytes) else str(word).encode()
        out += b"$%d\r\n%s\r\n" % (len(word), word)
    return out


class Redis:
    """redis-server on a Unix socket of the test, spoken to in RESP over a raw socket."""

    def __init__(self, tmp_path):
        server = shutil.which("redis-server")
        if server is None:
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        self.path = str(tmp_path / "redis.sock")
        self.proc = subprocess.Popen(
            [server, "--port", "0", "--unixsocket", self.path, "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--dir", str(tmp_path)],
            env=dict(os.environ, MALLOC_CONF="dirty_decay_ms:60000"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:  # the socket's file appears when redis binds it, before it listens
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()  # never left running by a failed start
                self.proc.wait()
                raise AssertionError("redis-server did not start")
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.settimeout(20)
            try:
                self.sock.connect(self.path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                self.sock.close()
                time.sleep(0.02)
        self.buffer = b""

    def _reply(self):
        """One RESP reply: simple strings, errors, integers and bulk strings (all this test sends back)."""
        while b"\r\n" not in self.buffer:
            self.buffer += self.sock.recv(1 << 20)
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b":"):
            return rest.decode()
        if kind == b"-":
            raise AssertionError(f"redis: {rest.decode()}")
        assert kind == b"$", line
        size = int(rest)
        if size < 0:
            return None
        while len(self.buffer) < size + 2:
            self.buffer += self.sock.recv(1 << 20)
        data, self.buffer = self.buffer[:size], self.buffer[size + 2:]
        return data

    def pipeline(self, commands):
        self.sock.sendall(b"".join(commands))
        return [self._reply() for _ in commands]

    def call(self, *words):
        return self.pipeline([_command(*words)])[0]

    def info_memory(self):
        text = self.call("INFO", "memory").decode()
        return {k: int(v) for k, v in (line.split(":", 1) for line in text.split("\r\n") if ":" in line)
                if v.isdigit()}

    def fill_and_delete(self):
        """KEYS keys, then the first DELETED of them deleted: whole pages freed (dirty), the rest kept;
        returns once Redis's own figures have settled (it frees client buffers in its cron)."""
        for start in range(0, KEYS, 10_000):
            self.pipeline([_command("SET", f"key:{i}", VALUE) for i in range(start, start + 10_000)])
        for start in range(0, DELETED, 10_000):
            assert self.pipeline([_command("DEL", f"key:{i}") for i in range(start, start + 10_000)]) == \
                ["1"] * 10_000
        last, deadline = None, time.monotonic() + 5
        while time.monotonic() < deadline:
            now = self.info_memory()["allocator_allocated"]
            if now == last:
                break
            last = now
            time.sleep(0.2)

    def check_answers(self):
        assert self.proc.poll() is None, "redis-server died"
        assert self.call("PING") == "PONG"
        assert self.call("GET", f"key:{KEYS - 1}") == VALUE and self.call("GET", "key:0") is None
        assert self.call("DBSIZE") == str(KEYS - DELETED)

    def close(self):
        self.sock.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def redis(tmp_path):
    server = Redis(tmp_path)
    try:
        server.fill_and_delete()
        yield server
    finally:
        server.close()


def _close(ours, theirs, share=0.05):
    return abs(ours - theirs) <= share * theirs


def test_deep_reads_redis_jemalloc_as_redis_does(redis):
    before = redis.info_memory()
    proc = memgap("inspect", str(redis.proc.pid), "--deep", "--json", "-")
    after = redis.info_memory()
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    deep = doc["deep"]
    assert deep["routes"] == ["outside", "gdb mallctl"], deep["notes"]
    j = deep["jemalloc"]
    assert j["route"] == "gdb mallctl" and j["symbol"] == "mallctl"
    for name in ("allocated", "active", "resident"):
        for info in (before, after):  # Redis's INFO just before and just after memgap's read
            assert _close(j[name], info[f"allocator_{name}"]), (name, j[name], before, after)
    # what only the process knows: the decay its environment set, and the pages the deletes left dirty
    assert j["dirty_decay_ms"] == 60000 and all(a["dirty_decay_ms"] == 60000 for a in j["arenas"])
    assert j["dirty_bytes"] >= 10 * MiB, j
    # from outside jemalloc's pages are other_anon; with its counters, named layers hold >= 90% of RSS
    outside = doc["layers"]
    assert outside["other_anon"]["resident"] >= 0.5 * doc["rss"], outside["other_anon"]
    layers = deep["with_allocator"]["layers"]
    assert layers["allocator_in_use"]["source"] == "gdb mallctl"
    assert layers["other_anon"]["resident"] <= 0.10 * doc["rss"], {k: v["resident"] for k, v in layers.items()}
    # the dirty pages memgap counted per arena lie within what Redis counts resident beyond active, less
    # at most jemalloc's metadata
    beyond_active = after["allocator_resident"] - after["allocator_active"]
    assert 0.95 * (beyond_active - j["metadata"]) <= j["dirty_bytes"] <= 1.05 * beyond_active, (j, after)
    # gdb held Redis briefly
    assert deep["gdb_seconds"]["held"] < 2.0, deep["gdb_seconds"]
    print(f"memgap vs INFO: allocated {j['allocated']} / {after['allocator_allocated']}, active {j['active']} / "
          f"{after['allocator_active']}, resident {j['resident']} / {after['allocator_resident']}; "
          f"other_anon {layers['other_anon']['resident']} of RSS {doc['rss']}; gdb {deep['gdb_seconds']}")
    redis.check_answers()
    text = memgap("inspect", str(redis.proc.pid), "--deep")
    assert text.returncode == 0, text.stderr[-2000:]
    flat = " ".join(text.stdout.split())
    assert "jemalloc (mallctl, gdb mallctl)" in flat and "allocator layers from gdb mallctl" in flat
    redis.check_answers()


def test_trim_purges_redis_jemalloc_and_measures_it(redis):
    info = redis.info_memory()
    proc = memgap("inspect", str(redis.proc.pid), "--trim", "--json", "-")
    assert proc.returncode == 0, proc.stderr[-2000:]
    trim = json.loads(proc.stdout)["after_trim"]["trim"]
    assert trim["performed"] and trim["route"] == "gdb" and trim["call"] == 'mallctl("arena.4096.purge")'
    assert trim["returned"] == 0 and trim["estimate_route"] == "gdb mallctl"
    # the deleted keys' pages: what Redis counts resident beyond active, less jemalloc's metadata
    assert trim["estimate"] >= 10 * MiB and trim["released"] >= 10 * MiB, trim
    assert abs(trim["released"] - trim["estimate"]) <= 0.1 * trim["estimate"] + MiB, trim
    assert abs(vmrss(redis.proc.pid) - trim["rss_after"]) <= MiB, (vmrss(redis.proc.pid), trim)
    after = redis.info_memory()
    # Redis's own count of resident pages fell by about what VmRSS did
    drop = info["allocator_resident"] - after["allocator_resident"]
    assert abs(drop - trim["released"]) <= 0.1 * trim["released"] + MiB, (drop, trim)
    print(f"trim: estimate {trim['estimate']}, released {trim['released']} (VmRSS {trim['rss_before']} -> "
          f"{trim['rss_after']}), Redis's allocator_resident fell {drop}; gdb {trim['gdb_seconds']}")
    redis.check_answers()


# --- jemalloc linked in statically -----------------------------------------------------------

@pytest.fixture(scope="module")
def je_stats(je_stats_exe, tmp_path_factory):
    """programs/je_stats.c built with Debian's libjemalloc.a (conftest), and a stripped copy."""
    stripped = str(tmp_path_factory.mktemp("je_stats_stripped") / "je_stats-stripped")
    shutil.copy(je_stats_exe, stripped)
    subprocess.run(["strip", stripped], check=True)
    return je_stats_exe, stripped


def test_deep_calls_the_mallctl_a_static_program_links_in(je_stats):
    program = OwnFigures(je_stats[0])
    try:
        proc = memgap("inspect", str(program.proc.pid), "--deep", "--json", "-")
        assert proc.returncode == 0, proc.stderr[-2000:]
        later = program.figures()
    finally:
        program.close()
    doc = json.loads(proc.stdout)
    serving = doc["allocator"]["found"][0]
    assert serving["name"] == "jemalloc" and serving["library"].endswith("je_stats"), serving
    j = doc["deep"]["jemalloc"]
    assert j["symbol"] == "mallctl"
    # memgap's own blocks (names, slots) come from the program's malloc: a tcache fill or two
    for name in ("allocated", "active", "resident", "mapped", "metadata"):
        for figures in (program.first, later):
            assert abs(j[name] - figures[name]) <= 128 * 1024, (name, j[name], program.first, later)
    # the arenas' pages, summed by memgap, against the program's merged count (stats.arenas.4096)
    assert abs(j["dirty_bytes"] // j["page"] - program.first["pdirty"]) <= 16, (j, program.first)
    assert j["dirty_bytes"] >= 2 * MiB
    # what the program set for itself (its malloc_conf, and the arena it created) and nobody else knows
    assert j["narenas"] == program.first["narenas"] == 6 and j["dirty_decay_ms"] == 30000
    assert j["background_thread_on"] is False
    assert len(j["arenas"]) >= 2  # the main thread's arena and the thread's own
    layers = doc["deep"]["with_allocator"]["layers"]
    assert layers["allocator_in_use"]["resident"] == j["allocated"]  # not clamped: the pages are there
    # free holds at least the program's own dirty pages and slack (active - allocated), less a few pages
    first = program.first
    assert layers["allocator_free"]["resident"] >= first["pdirty"] * 4096 + first["active"] - first["allocated"] \
        - 64 * 1024, (layers["allocator_free"], first)
    assert layers["other_anon"]["resident"] <= 0.10 * doc["rss"]


def test_deep_and_trim_refuse_a_stripped_static_jemalloc(je_stats):
    program = OwnFigures(je_stats[1])
    try:
        for option in ("--deep", "--trim"):
            proc = memgap("inspect", str(program.proc.pid), option)
            assert proc.returncode == 5, (proc.returncode, proc.stderr)
            assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("memgap: "), proc.stderr
            assert "no mallctl symbol" in proc.stderr and "stripped" in proc.stderr, proc.stderr
        later = program.figures()
    finally:
        program.close()
    assert later["pdirty"] == program.first["pdirty"]  # nothing ran in it


def test_tiny_gdb_timeouts_leave_the_static_program_as_it_was(je_stats):
    """Timeouts that cut gdb short before, around and during the mallctl batches: the program answers
    after each, and what it holds is what it held (memgap's blocks freed, or said to stay)."""
    program = OwnFigures(je_stats[0])
    cut = []
    try:
        # on the idle 2-core machine gdb is set up by 0.08 s and done by 0.15 s: these cut it at each step
        for limit in ("0.05", "0.09", "0.1", "0.11", "0.13"):
            proc = memgap("inspect", str(program.proc.pid), "--deep", "--gdb-timeout", limit)
            if proc.returncode:
                assert proc.returncode == 1 and "did not finish" in proc.stderr, (proc.returncode, proc.stderr)
                cut.append(proc.stderr.split("did not finish ")[1].split(" in PID")[0])
            figures = program.figures()
            assert abs(figures["allocated"] - program.first["allocated"]) <= 128 * 1024, (limit, figures)
            assert abs(figures["pdirty"] - program.first["pdirty"]) <= 16, (limit, figures)
    finally:
        program.close()
    print(f"gdb cut short at: {cut}")


# --- jemalloc linked in under a prefix, stripped, beside glibc's malloc -----------------------------

def _share(layer, key):
    return layer["detail"]["by_allocator"][key]


def test_deep_reads_a_stripped_prefixed_jemalloc_beside_glibc(je_prefixed_exe):
    """Redis's shape: jemalloc linked in as je_*, the program stripped, je_mallctl left in .dynsym by
    -rdynamic; glibc's malloc serves the C library and the program's plain mallocs (a share of its own).
    Both allocators' figures against the program's own (mallctl, and glibc's mallinfo2), read just before
    and just after memgap's."""
    exe = je_prefixed_exe[0]
    assert "no symbols" in subprocess.run(["nm", exe], capture_output=True, text=True).stderr  # stripped
    program = OwnFigures(exe)
    try:
        proc = memgap("inspect", str(program.proc.pid), "--deep", "--json", "-")
        assert proc.returncode == 0, proc.stderr[-2000:]
        later = program.figures()
        text = memgap("inspect", str(program.proc.pid), "--deep")
        assert text.returncode == 0, text.stderr[-2000:]
    finally:
        program.close()
    doc = json.loads(proc.stdout)
    found = {f["name"]: f for f in doc["allocator"]["found"]}
    assert found["glibc"]["serves_malloc"] and found["jemalloc"]["prefix"] == "je_", found
    assert found["jemalloc"]["exported"] and found["jemalloc"]["library"] == exe
    deep = doc["deep"]
    j = deep["jemalloc"]
    assert j["symbol"] == "je_mallctl" and deep["jemalloc_beside"].startswith("jemalloc (je_)"), deep["notes"]
    assert deep["malloc_info"] is not None  # glibc's read too, in the same attach
    for name in ("allocated", "active", "resident"):
        for figures in (program.first, later):
            assert _close(j[name], figures[name]), (name, j[name], program.first, later)
    assert j["dirty_decay_ms"] == 30000 and j["narenas"] == 6  # the program's own malloc_conf and arena
    rss = deep["with_allocator"]["rss"]
    layers = deep["with_allocator"]["layers"]
    in_use, free = layers["allocator_in_use"], layers["allocator_free"]
    je_key = "jemalloc (je_mallctl)"
    # jemalloc's share: its allocated bytes in use; slack, dirty pages and metadata free, within its resident
    assert _share(in_use, je_key) == j["allocated"]
    assert _share(in_use, je_key) + _share(free, je_key) <= 1.02 * later["resident"], (in_use, free, later)
    assert _share(free, je_key) >= later["pdirty"] * 4096, (free["detail"], later)
    # glibc's share, walked from outside: in use and free together are the heap glibc says it has
    # (arena) plus its mmapped block; what it says is free bounds the free pages found
    first = program.first
    glibc_held = _share(in_use, "glibc") + _share(free, "glibc")
    assert abs(glibc_held - first["g_arena"] - first["g_mmapped"]) <= 0.03 * (first["g_arena"] + first["g_mmapped"]) \
        + 256 * 1024, (in_use["detail"]["by_allocator"], free["detail"]["by_allocator"], first)
    assert 0.5 * first["g_free"] <= _share(free, "glibc") <= first["g_free"], (free["detail"]["by_allocator"], first)
    # nothing counted twice: the layers add up to VmRSS, and what no one claims is under 10% of it
    assert abs(deep["with_allocator"]["unexplained"]) <= 0.02 * rss, deep["with_allocator"]["unexplained"]
    assert layers["other_anon"]["resident"] <= 0.10 * rss, {k: v["resident"] for k, v in layers.items()}
    assert in_use["resident"] == sum(in_use["detail"]["by_allocator"].values())
    flat = " ".join(text.stdout.split())
    assert "beside: jemalloc (prefix je_)" in flat and "beside glibc's malloc: both allocators hold memory" in flat
    assert "glibc: glibc heaps' resident bytes" in in_use["derivation"] and "plus jemalloc (je_mallctl)" in \
        in_use["derivation"]
    print(f"jemalloc beside glibc: allocated {j['allocated']} / {later['allocated']}, resident {j['resident']} / "
          f"{later['resident']}; glibc held {glibc_held} / arena+mmapped {first['g_arena'] + first['g_mmapped']}; "
          f"other_anon {layers['other_anon']['resident']} of RSS {rss}")


def test_trim_releases_glibc_and_the_prefixed_jemalloc_each_measured(je_prefixed_exe):
    program = OwnFigures(je_prefixed_exe[0])
    try:
        proc = memgap("inspect", str(program.proc.pid), "--trim", "--json", "-")
        assert proc.returncode == 0, proc.stderr[-2000:]
        rss = vmrss(program.proc.pid)
        later = program.figures()
    finally:
        program.close()
    trim = json.loads(proc.stdout)["after_trim"]["trim"]
    first = program.first
    glibc, jemalloc = trim["parts"]["glibc"], trim["parts"]["jemalloc"]
    assert trim["performed"] and jemalloc["call"] == 'je_mallctl("arena.4096.purge")' and jemalloc["returned"] == 0
    # jemalloc's purge: the dirty pages the program counted, gone by VmRSS and by its own count
    assert abs(jemalloc["released"] - first["pdirty"] * 4096) <= 0.1 * first["pdirty"] * 4096 + 128 * 1024, \
        (jemalloc, first)
    assert later["pdirty"] == 0 and abs((first["resident"] - later["resident"]) - jemalloc["released"]) <= \
        0.1 * jemalloc["released"] + 128 * 1024, (first, later, jemalloc)
    # glibc's trim: the free pages of its heap, as the outside walk estimated, measured by VmRSS
    assert glibc["released"] >= 2 * MiB and abs(glibc["released"] - glibc["estimate"]) <= \
        0.1 * glibc["estimate"] + 128 * 1024, glibc
    assert trim["released"] == trim["rss_before"] - trim["rss_after"] and abs(rss - trim["rss_after"]) <= MiB
    print(f"trim: glibc {glibc['released']} (estimate {glibc['estimate']}), jemalloc {jemalloc['released']} "
          f"(estimate {jemalloc['estimate']}, the program's dirty pages {first['pdirty'] * 4096})")


def test_a_stripped_prefixed_jemalloc_that_exports_nothing_is_named_and_left_unread(je_prefixed_exe):
    program = OwnFigures(je_prefixed_exe[1])
    try:
        proc = memgap("inspect", str(program.proc.pid), "--deep", "--json", "-")
        later = program.figures()
    finally:
        program.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    beside = [f for f in doc["allocator"]["found"] if not f["serves_malloc"]]
    assert [(f["name"], f["prefix"]) for f in beside] == [("jemalloc", "?")], beside
    assert doc["deep"]["jemalloc"] is None and any("jemalloc beside glibc's malloc not read" in n and "stripped" in n
                                                   for n in doc["deep"]["notes"]), doc["deep"]["notes"]
    assert later["pdirty"] == program.first["pdirty"]  # nothing ran in its jemalloc


# --- jemalloc from a Rust crate: tikv-jemallocator, its API under _rjem_, beside glibc's malloc -------

@pytest.fixture
def rjem(rust_build):
    """programs/rjem running: a Rust program whose heap is tikv-jemallocator's jemalloc, built with its
    statistics; it prints its own mallctl figures (and jemalloc's page size) when asked."""
    program = OwnFigures(os.path.join(rust_build, "rjem"))
    try:
        yield program
    finally:
        program.close()


@pytest.mark.cargo
def test_deep_reads_a_rust_programs_jemalloc_as_it_does(rjem):
    """jemalloc named beside glibc with its prefix; --deep's figures within 5% of the program's own, read
    just before and just after memgap's (the program idle between); named layers hold >= 90% of RSS."""
    proc = memgap("inspect", str(rjem.proc.pid), "--deep", "--json", "-")
    later = rjem.figures()
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    exe = os.path.realpath(rjem.proc.args[0])
    found = {f["name"]: f for f in doc["allocator"]["found"]}
    assert found["glibc"]["serves_malloc"] and not found["jemalloc"]["serves_malloc"], found
    assert found["jemalloc"]["prefix"] == "_rjem_" and found["jemalloc"]["library"] == exe, found
    deep = doc["deep"]
    j = deep["jemalloc"]
    assert j is not None and j["symbol"] == "_rjem_mallctl", deep["notes"]
    assert deep["jemalloc_beside"].startswith("jemalloc (_rjem_)"), deep["jemalloc_beside"]
    for name in ("allocated", "active", "resident"):
        for figures in (rjem.first, later):
            assert _close(j[name], figures[name]), (name, j[name], rjem.first, later)
    # what the program set for itself (its _rjem_malloc_conf) and its own count of arenas and dirty pages
    assert j["dirty_decay_ms"] == 30000 and j["narenas"] == later["narenas"], (j["dirty_decay_ms"], later)
    assert j["page"] == later["page"]
    assert len([a for a in j["arenas"] if a["pdirty"]]) >= 2, j["arenas"]  # the main thread's arena and the worker's
    assert abs(j["dirty_bytes"] // j["page"] - later["pdirty"]) <= 16 and j["dirty_bytes"] >= 16 * MiB, (j, later)
    rss = deep["with_allocator"]["rss"]
    layers = deep["with_allocator"]["layers"]
    in_use, free = layers["allocator_in_use"], layers["allocator_free"]
    key = "jemalloc (_rjem_mallctl)"
    assert _share(in_use, key) == j["allocated"]
    assert _share(free, key) >= later["pdirty"] * later["page"], free["detail"]
    assert abs(deep["with_allocator"]["unexplained"]) <= 0.02 * rss, deep["with_allocator"]["unexplained"]
    assert layers["other_anon"]["resident"] <= 0.10 * rss, {k: v["resident"] for k, v in layers.items()}
    print(f"rjem: allocated {j['allocated']} / {later['allocated']}, active {j['active']} / {later['active']}, "
          f"resident {j['resident']} / {later['resident']}; other_anon {layers['other_anon']['resident']} of "
          f"RSS {rss}; gdb {deep['gdb_seconds']}")


@pytest.mark.cargo
def test_trim_purges_a_rust_programs_jemalloc_measured(rjem):
    """--trim's release against VmRSS read by the test around it and the program's dirty pages before."""
    rss_before = vmrss(rjem.proc.pid)
    proc = memgap("inspect", str(rjem.proc.pid), "--trim", "--json", "-")
    rss_after = vmrss(rjem.proc.pid)
    later = rjem.figures()
    assert proc.returncode == 0, proc.stderr[-2000:]
    trim = json.loads(proc.stdout)["after_trim"]["trim"]
    first, page = rjem.first, rjem.first["page"]
    dirty = first["pdirty"] * page
    jemalloc = trim["parts"]["jemalloc"]
    assert trim["performed"] and jemalloc["call"] == '_rjem_mallctl("arena.4096.purge")' and jemalloc["returned"] == 0
    assert dirty >= 16 * MiB, first
    # the estimate (dirty and muzzy pages read through gdb just before the purge) is the program's dirty pages
    assert abs(jemalloc["estimate"] - dirty) <= 16 * page, (jemalloc, first)
    # the release memgap measured, the drop in VmRSS the test read around memgap, and the program's own
    # count of resident pages: each the dirty pages it had, within 10%
    assert abs(jemalloc["released"] - dirty) <= 0.1 * dirty, (jemalloc, first)
    assert abs((rss_before - rss_after) - dirty) <= 0.1 * dirty, (rss_before, rss_after, first)
    assert later["pdirty"] == 0 and abs((first["resident"] - later["resident"]) - dirty) <= 0.1 * dirty, later
    assert abs(rss_after - trim["rss_after"]) <= 256 * 1024, (rss_after, trim)
    print(f"rjem trim: released {trim['released']} (jemalloc {jemalloc['released']}, estimate "
          f"{jemalloc['estimate']}); VmRSS {rss_before} -> {rss_after}; the program's dirty pages {dirty}")
