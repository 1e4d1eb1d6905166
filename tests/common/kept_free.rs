//! Whether a free kept its object charged in the thread's object stock, seen from the
//! thread's bin of uncharged accounted slots (an uncharging free pushes there). Shared by
//! `tests/object_stock_caching.rs` and `tests/object_stock_budget_caching.rs`.

use std::hint::black_box;

use slabcg::allocator::testing::thread_cache;

/// Slots in this thread's bin of uncharged accounted slots of class `c`.
fn uncharged_in_bin(c: usize) -> u32 {
    thread_cache::with(|tc| {
        tc.bin(c, slabcg::allocator::testing::Kind::Accounted)
            .count()
    })
}

/// Allocates one 256-byte object (class `c`) in the current scope and frees it; true when
/// the free kept it charged in the object stock (the uncharged bin did not grow).
pub fn free_is_kept(c: usize) -> bool {
    let v = black_box(vec![7u8; 256]);
    let before = uncharged_in_bin(c);
    drop(v);
    uncharged_in_bin(c) == before
}
