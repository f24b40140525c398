//! A library whose Rust heap is jemalloc's, loaded into a C program whose malloc stays glibc's.

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Allocates `bytes` from the library's jemalloc and keeps them.
#[no_mangle]
pub extern "C" fn rjem_hold(bytes: usize) -> usize {
    let held = vec![1u8; bytes];
    let len = held.len();
    std::mem::forget(held);
    len
}
