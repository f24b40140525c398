//! Holds a few MiB from jemalloc (the Rust heap) and waits to be read.
use std::io::{Read, Write};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let held = vec![1u8; 4 << 20];
    println!("ready {}", held.len());
    std::io::stdout().flush().unwrap();
    let mut buf = [0u8; 1];
    let _ = std::io::stdin().read(&mut buf); // until the test closes stdin
}
