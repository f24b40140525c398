//! A Rust program whose heap is tikv-jemallocator's jemalloc (its API under `_rjem_`), glibc's
//! malloc beside it for the C library. Like programs/je_stats.c: holds blocks in two arenas (the
//! main thread's and a second thread's, which stays), frees most of them so that dirty pages and
//! slack remain, then prints its own figures read from jemalloc's mallctl and says "ready". Each
//! line on stdin makes it print them again; it exits when stdin closes. tests/test_jemalloc_deep.py
//! checks `memgap inspect --deep` and `--trim` against these figures.
use std::ffi::{c_char, c_void};
use std::io::{BufRead, Write};
use std::ptr::null_mut;

use tikv_jemalloc_sys::mallctl;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Read by jemalloc at start-up (its weak `_rjem_malloc_conf` yields to this one). A long decay:
/// the dirty pages stay put between the program's print and memgap's read.
#[no_mangle]
pub static _rjem_malloc_conf: &[u8; 48] = b"dirty_decay_ms:30000,muzzy_decay_ms:0,narenas:4\0";

const COUNT: usize = 20_000;

/// COUNT blocks of `size` bytes and a little more, written; the first three quarters freed (whole
/// pages become dirty), then all but every `keep_every`-th of the rest (slack in pages kept active).
fn hold_and_free(size: usize, keep_every: usize) -> Vec<Vec<u8>> {
    let blocks: Vec<Vec<u8>> = (0..COUNT).map(|i| vec![1u8; size + i % 64]).collect();
    blocks
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i >= COUNT * 3 / 4 && i % keep_every == 0)
        .map(|(_, b)| b)
        .collect()
}

/// The value of mallctl `name` (NUL-terminated); a jemalloc built without statistics refuses it.
fn get<T: Copy + Default>(name: &[u8]) -> T {
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>();
    let rc = unsafe {
        mallctl(name.as_ptr() as *const c_char, &mut value as *mut T as *mut c_void, &mut len, null_mut(), 0)
    };
    assert_eq!(rc, 0, "mallctl {}", String::from_utf8_lossy(name));
    value
}

fn print_stats(out: &mut impl Write) {
    // the statistics are a snapshot taken when epoch is written
    let mut epoch: u64 = 1;
    let mut len = std::mem::size_of::<u64>();
    let p = &mut epoch as *mut u64 as *mut c_void;
    assert_eq!(unsafe { mallctl(b"epoch\0".as_ptr() as *const c_char, p, &mut len, p, len) }, 0);
    writeln!(
        out,
        "allocated={} active={} resident={} retained={} mapped={} metadata={} pdirty={} pmuzzy={} narenas={} page={}",
        get::<usize>(b"stats.allocated\0"),
        get::<usize>(b"stats.active\0"),
        get::<usize>(b"stats.resident\0"),
        get::<usize>(b"stats.retained\0"),
        get::<usize>(b"stats.mapped\0"),
        get::<usize>(b"stats.metadata\0"),
        get::<usize>(b"stats.arenas.4096.pdirty\0"),
        get::<usize>(b"stats.arenas.4096.pmuzzy\0"),
        get::<u32>(b"arenas.narenas\0"),
        get::<usize>(b"arenas.page\0"),
    )
    .unwrap();
    out.flush().unwrap();
}

fn main() {
    let big = vec![1u8; 4 << 20]; // one large extent, held
    let small = hold_and_free(300, 2);
    // a second thread, as a service's worker: jemalloc gives it an arena of its own (narenas:4), where
    // it holds larger blocks; it stays (parked), since jemalloc purges the arena of a thread that exits
    let (done, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _kept = hold_and_free(1000, 3);
        done.send(()).unwrap();
        loop {
            std::thread::park();
        }
    });
    ready.recv().unwrap();
    let mut out = std::io::stdout().lock();
    print_stats(&mut out);
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    let mut line = String::with_capacity(64);
    let mut input = std::io::stdin().lock();
    while input.read_line(&mut line).unwrap_or(0) > 0 {
        line.clear();
        print_stats(&mut out);
    }
    drop((big, small));
}
