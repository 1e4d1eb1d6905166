//! The GlobalAlloc contract over sizes 0..=1 MiB and alignments 1..=64 KiB: alignment,
//! usable size, zeroing, and realloc keeping contents, through the allocator installed as the
//! global allocator of this test binary.

use std::alloc::{GlobalAlloc, Layout};

use slabcg_allocator::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

fn sizes() -> Vec<usize> {
    let mut v: Vec<usize> = (0..=4096).collect();
    let mut s = 4096;
    while s <= 1 << 20 {
        for d in [-1isize, 0, 1, 7, 4095] {
            v.push((s as isize + d) as usize);
        }
        s = s * 5 / 4 + 1;
    }
    v.push(1 << 20);
    v
}

fn fill(p: *mut u8, n: usize, seed: usize) {
    for i in 0..n {
        // SAFETY: p has n writable bytes.
        unsafe { *p.add(i) = (i.wrapping_mul(31) ^ seed) as u8 };
    }
}

fn check(p: *const u8, n: usize, seed: usize) {
    for i in 0..n {
        // SAFETY: p has n readable bytes.
        let b = unsafe { *p.add(i) };
        assert_eq!(b, (i.wrapping_mul(31) ^ seed) as u8, "byte {i} of {n}");
    }
}

#[test]
fn alloc_alignment_usable_size() {
    let a = SlabAlloc::new();
    let mut align = 1;
    while align <= 64 * 1024 {
        for &size in sizes().iter().step_by(if align > 4096 { 97 } else { 13 }) {
            let l = Layout::from_size_align(size, align).unwrap();
            // SAFETY: valid layout; the block is freed with the same layout.
            unsafe {
                let p = a.alloc(l);
                assert!(!p.is_null(), "size {size} align {align}");
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                assert!(SlabAlloc::usable_size(p) >= size);
                let n = size.min(4096);
                fill(p, n, size);
                if size > n {
                    fill(p.add(size - 64), 64, size);
                }
                check(p, n, size);
                a.dealloc(p, l);
            }
        }
        align *= 2;
    }
}

#[test]
fn alloc_zeroed_is_zero_even_after_reuse() {
    let a = SlabAlloc::new();
    for &size in sizes().iter().step_by(7) {
        for align in [8, 64, 8192] {
            let l = Layout::from_size_align(size.max(1), align).unwrap();
            // SAFETY: valid layout, matching frees.
            unsafe {
                // Dirty a block, free it, then ask for a zeroed one of the same layout.
                let d = a.alloc(l);
                std::ptr::write_bytes(d, 0xAB, l.size());
                a.dealloc(d, l);
                let p = a.alloc_zeroed(l);
                assert!(!p.is_null());
                let s = std::slice::from_raw_parts(p, l.size());
                assert!(s.iter().all(|&b| b == 0), "size {size} align {align}");
                a.dealloc(p, l);
            }
        }
    }
}

#[test]
fn realloc_keeps_contents() {
    let a = SlabAlloc::new();
    let steps = [
        1usize,
        8,
        24,
        100,
        1000,
        4096,
        5000,
        70_000,
        131_072,
        131_073,
        300_000,
        1 << 20,
    ];
    for align in [1usize, 16, 64, 4096, 16384] {
        for &from in &steps {
            for &to in &steps {
                let l = Layout::from_size_align(from, align).unwrap();
                // SAFETY: valid layouts; the block is freed with its current layout.
                unsafe {
                    let p = a.alloc(l);
                    fill(p, from, from ^ to);
                    let q = a.realloc(p, l, to);
                    assert!(!q.is_null());
                    assert_eq!(q as usize % align, 0);
                    check(q, from.min(to), from ^ to);
                    assert!(SlabAlloc::usable_size(q) >= to);
                    a.dealloc(q, Layout::from_size_align(to, align).unwrap());
                }
            }
        }
    }
}

#[test]
fn impossible_requests_return_null() {
    let a = SlabAlloc::new();
    let l = Layout::from_size_align(isize::MAX as usize - 4096 * 4, 4096).unwrap();
    // SAFETY: valid layout; null is checked.
    unsafe {
        assert!(a.alloc(l).is_null());
        assert!(a.alloc_zeroed(l).is_null());
        let big = Layout::from_size_align(isize::MAX as usize / 2 + 1, 8).unwrap();
        assert!(
            a.alloc(big).is_null(),
            "half the address space must not be served"
        );
        let p = a.alloc(Layout::from_size_align(64, 8).unwrap());
        fill(p, 64, 3);
        assert!(a
            .realloc(
                p,
                Layout::from_size_align(64, 8).unwrap(),
                isize::MAX as usize - 8192
            )
            .is_null());
        // A failed realloc leaves the block untouched.
        check(p, 64, 3);
        a.dealloc(p, Layout::from_size_align(64, 8).unwrap());
    }
}

#[test]
fn std_collections_heavy() {
    use std::collections::{BTreeMap, HashMap, VecDeque};
    let mut m: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut b: BTreeMap<String, u64> = BTreeMap::new();
    let mut q: VecDeque<Box<[u64]>> = VecDeque::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..200_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 700) as usize;
        m.insert(x % 5000, vec![(i % 251) as u8; len]);
        b.insert(format!("k{}", x % 20_000), i);
        q.push_back(vec![i; (x % 64) as usize].into_boxed_slice());
        if q.len() > 1000 {
            let v = q.pop_front().unwrap();
            assert!(v.iter().all(|&e| e == v.first().copied().unwrap_or(0)));
        }
    }
    for v in m.values() {
        assert!(v.windows(2).all(|w| w[0] == w[1]));
    }
    assert!(b.len() <= 20_000);
    let mut s = String::new();
    for i in 0..100_000 {
        s.push_str(&i.to_string());
    }
    assert!(s.len() > 400_000);
}

/// The free path tells accounted slots from plain ones by one address bit
/// (`segment::ACCOUNTED_BIT`): it must agree with the segment header for every class.
#[test]
fn accounted_slots_carry_the_address_bit() {
    use slabcg_allocator::testing::CLASS_SIZES;
    use slabcg_allocator::testing::{segment_of, ACCOUNTED_BIT};
    let tenant = slabcg_accounting::Tenant::new("address-bit");
    for (c, &size) in CLASS_SIZES.iter().enumerate() {
        let l = Layout::from_size_align(size as usize, 8).unwrap();
        // SAFETY: valid layouts; each block freed once with its layout.
        unsafe {
            let p = GLOBAL.alloc(l);
            let q = {
                let _scope = tenant.enter();
                GLOBAL.alloc(l)
            };
            assert!(!p.is_null() && !q.is_null());
            assert_eq!(p as usize & ACCOUNTED_BIT, 0, "plain slot of class {c}");
            assert_ne!(q as usize & ACCOUNTED_BIT, 0, "accounted slot of class {c}");
            assert!(!(*(*segment_of(p)).cache).accounted);
            assert!((*(*segment_of(q)).cache).accounted);
            GLOBAL.dealloc(q, l);
            GLOBAL.dealloc(p, l);
        }
    }
    assert_eq!(tenant.current_exact(), 0);
}
