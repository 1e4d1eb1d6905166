//! Random Alloc / AllocZeroed / Realloc / Free actions checked against a shadow model: a
//! BTreeMap of live regions that must never overlap, each block's bytes derived from a tag
//! that must survive until it is freed (and across realloc, up to the smaller size).

use std::alloc::{GlobalAlloc, Layout};
use std::collections::BTreeMap;

use slabcg_allocator::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

mod common;
#[path = "common/pattern.rs"]
mod pattern;
use common::Rng;
use pattern::{check, fill};

struct Live {
    layout: Layout,
    tag: u8,
}

/// No live region may overlap [start, end).
fn assert_free(model: &BTreeMap<usize, Live>, start: usize, end: usize) {
    if let Some((&s, l)) = model.range(..end).next_back() {
        assert!(
            s + l.layout.size().max(1) <= start || s >= end,
            "overlap at {start:#x}"
        );
    }
}

fn random_layout(rng: &mut Rng) -> Layout {
    let r = rng.next();
    let size = match r % 32 {
        0 => (r >> 8) as usize % (600 << 10),
        1..=6 => (r >> 8) as usize % 20_000,
        _ => (r >> 8) as usize % 600,
    };
    let align = 1usize << ((r >> 40) % if r.is_multiple_of(64) { 15 } else { 6 });
    Layout::from_size_align(size, align).unwrap()
}

#[test]
fn shadow_model_of_random_actions() {
    let mut rng = Rng(0x0005_EED0_F5AB);
    let mut model: BTreeMap<usize, Live> = BTreeMap::new();
    for step in 0..60_000u32 {
        let action = rng.next() % 10;
        if model.is_empty() || action < 4 {
            let layout = random_layout(&mut rng);
            let zeroed = action == 0;
            // SAFETY: valid layout.
            let p = unsafe {
                if zeroed {
                    GLOBAL.alloc_zeroed(layout)
                } else {
                    GLOBAL.alloc(layout)
                }
            };
            assert!(!p.is_null());
            assert_eq!(p as usize % layout.align(), 0);
            if zeroed {
                // SAFETY: p has layout.size() bytes.
                assert!(unsafe { std::slice::from_raw_parts(p, layout.size()) }
                    .iter()
                    .all(|&b| b == 0));
            }
            let start = p as usize;
            assert_free(&model, start, start + layout.size().max(1));
            let tag = step as u8;
            fill(p, layout.size(), tag);
            model.insert(start, Live { layout, tag });
        } else {
            let k = rng.next() as usize % model.len();
            let (&start, _) = model.iter().nth(k).unwrap();
            let live = model.remove(&start).unwrap();
            let p = start as *mut u8;
            check(p, live.layout.size(), live.tag);
            if action < 7 {
                let new = random_layout(&mut rng).size();
                // SAFETY: p is live with live.layout; new with its alignment is valid.
                let q = unsafe { GLOBAL.realloc(p, live.layout, new) };
                assert!(!q.is_null());
                assert_eq!(q as usize % live.layout.align(), 0);
                let keep = live.layout.size().min(new);
                check(q, keep, live.tag);
                let layout = Layout::from_size_align(new, live.layout.align()).unwrap();
                assert_free(&model, q as usize, q as usize + new.max(1));
                let tag = step as u8;
                fill(q, new, tag);
                model.insert(q as usize, Live { layout, tag });
            } else {
                // SAFETY: p is live, allocated with live.layout.
                unsafe { GLOBAL.dealloc(p, live.layout) };
            }
        }
    }
    for (start, live) in model {
        check(start as *const u8, live.layout.size(), live.tag);
        // SAFETY: live, allocated with this layout.
        unsafe { GLOBAL.dealloc(start as *mut u8, live.layout) };
    }
}
