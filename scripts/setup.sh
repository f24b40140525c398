#!/bin/sh
# Set up memgap on a Debian/Ubuntu machine: the allocators the lab compares,
# a virtual environment in .venv, and memgap installed into it.
set -eu
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=""
# libjemalloc-dev and redis-server: the allocator-detection tests link jemalloc in statically and read Debian's redis
# libgoogle-perftools-dev: test_tcmi_deep links tcmalloc in statically (libtcmalloc_minimal.a)
# postgresql: test_shared_memory reads a real server's shared buffers (a server of its own, started by the test)
for pkg in libjemalloc2 libjemalloc-dev libtcmalloc-minimal4 libgoogle-perftools-dev libmimalloc2.0 gcc gdb musl-tools chromium redis-server postgresql openssl; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
done
python3 -c "import ensurepip" >/dev/null 2>&1 || need="$need python3-venv"
command -v node >/dev/null 2>&1 || need="$need nodejs"  # test_runtime_v8: a Node program's V8 heap (checked on Node 20)
command -v javac >/dev/null 2>&1 && command -v jcmd >/dev/null 2>&1 || need="$need default-jdk-headless"  # test_runtime_jvm: javac builds its program, jcmd is the deep route and its witness
command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || need="$need golang-go"  # test_runtime_go builds programs/go_heap; test_lab_runtimes the lab on Go, Java and Node
[ -x /usr/lib/go-1.19/bin/go ] || need="$need golang-1.19-go"  # test_runtime_go builds programs/go_heap with Go 1.19 too (Debian 12's)
if [ -n "$need" ]; then
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
    # the tests start redis-server and postgres themselves: the services Debian starts on install go again
    case "$need" in *redis-server*)
        if [ -d /run/systemd/system ]; then $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true; fi ;;
    esac
    case "$need" in *postgresql*)
        if [ -d /run/systemd/system ]; then $SUDO systemctl disable --now postgresql >/dev/null 2>&1 || true; fi ;;
    esac
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
# The Rust program the allocator tests read (tests/programs/rjem: tikv-jemallocator, its jemalloc
# under the _rjem_ prefix, as Rust services and Polars ship it, with its statistics), built once here because its first
# build compiles jemalloc (minutes on 2 cores); the tests reuse its target folder.
CARGO="$(command -v cargo || echo "$HOME/.cargo/bin/cargo")"
if [ ! -x "$CARGO" ]; then
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cargo
    CARGO=cargo
fi
(cd tests/programs/rjem && "$CARGO" build --release --locked --quiet)
