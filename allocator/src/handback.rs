//! The hand-back: chains of free slots still charged to a tenant, which the thread that
//! freed them leaves for whichever thread next allocates for that tenant.
//!
//! Why. A thread that frees another thread's objects (a consumer; a tokio worker freeing
//! what another worker allocated) keeps them charged in its object stock
//! (`object_stock::adopt_on_free`); when that tagged bin fills, half of it had to be given
//! back: every slot uncharged and its owner word cleared, while the thread that allocates for
//! the tenant charged every new object one at a time (`charge::alloc_small_charging`, about
//! 80 instructions each). With a tenant per worker, xmalloc's producer/consumer pairs spent
//! a third of their instructions there. Now the half goes here, still charged (its owner
//! words 0 until a taker writes them again, below); the next charging allocation of that
//! tenant and class on a
//! thread whose object stock is tagged for it takes the whole chain into its tagged bin
//! (`ThreadCache::take_handed`), and its next pops are the same-tenant fast path.
//!
//! The table: [`ENTRIES`] entries, each one tenant and class with up to [`CHAINS`] chains,
//! [`BYTES_MAX`] in all, under one spin lock, taken once per chain (tens to hundreds of
//! slots) by each side. A full entry refuses (the chain is given back as before); a chain
//! that finds no entry free or the bytes at their bound evicts the entry least recently
//! used, whose chains the caller gives back. A charging allocation reads [`ANY`] and one
//! bit of [`HINT`] before it takes the lock, so threads of tenants with nothing here do not
//! touch the lock's line.
//!
//! Accounting. Slots here are charged and unused, like a stock's bytes or a tagged bin's
//! slots: they count in their tenant's `current`, and every drain of the stocks gives
//! them back first ([`release_all`]; `thread_cache::drain_object_stocks`), so
//! `current_exact()` stays exact and a charge is refused only after they were uncharged
//! (`put` notes the tenant as stocked, so a refusal does not skip its drain). The decay
//! sweep (alone: the accounting's idle drain leaves the table to it) gives back the
//! entries not used since the sweep before, so a tenant whose allocating thread went away
//! does not keep them for long; a dead tenant's half is given back instead of coming here,
//! and its entries go back when it dies ([`forget`]). A chain in flight (taken by a
//! thread, not yet in its bin) is in neither place for a moment, as a slot being freed
//! is: a drain that misses it leaves it charged, and the bin it lands in is the object
//! stock's, whose next drain or settle sees it (`object_stock.rs`, the growth a racing
//! free leaves; the taker settles at once when its pop finds a drainer's bit). So is an
//! entry on its way back (taken out by an eviction or a release, not yet uncharged): a
//! drain that runs meanwhile does not wait for it (nothing here waits for another thread),
//! so `current_exact()` may read its bytes and a refusal in that moment may skip a drain;
//! exact again when the release ends.
//! A fork child loses what was in flight in another thread at the fork, charges included
//! (a bounded leak of the child, as for the bins of threads that did not survive).
//!
//! Every slot of a chain here is a free slot of class `c`'s accounted cache, charged to
//! `cg` with `class_size(c)` bytes, its owner word 0; `n` slots linked from `head` to `tail`
//! (`tail`'s link null). The words are cleared on the way in (checked, as a give-back does:
//! a slot of the chain freed twice is reported) and written on the way out, so a double free
//! of a slot while it waits here finds its word 0 and is reported, as for a slot given
//! back. The lock is a leaf: nothing is called while it is held but the accounting's
//! lock-free note of the stocked tenant (`hooks::note_object_stock`) and its lock-free
//! check that a tenant is alive (`hooks::objcg_tenant_alive`).

use core::ptr;
// Statics keep core's atomics (`slabcg_sys::sync`: a loom model never reaches them).
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use slabcg_accounting::hooks::{self, ObjCgId, StatIdx};

use crate::bin::Bin;
use crate::class_caches;
use crate::lock::SpinLock;
use crate::size_class::{class_size, Kind, NUM_CLASSES};
use crate::slab::FreeObj;

/// Tenant and class pairs the table holds chains for at once.
const ENTRIES: usize = 64;
/// Chains per entry.
const CHAINS: usize = 8;
/// Bytes the table holds at most: what charged memory can wait here, unused, until a
/// thread of its tenant allocates again or a drain, `trim()` or an eviction gives it back.
const BYTES_MAX: usize = 4 << 20;
/// Words of [`HINT`].
const HINT_WORDS: usize = 64;

/// A chain of free slots of one class, linked from `head` to `tail`.
#[derive(Clone, Copy)]
pub(crate) struct Chain {
    pub(crate) head: *mut FreeObj,
    pub(crate) tail: *mut FreeObj,
    pub(crate) n: u32,
}

impl Chain {
    const NONE: Chain = Chain {
        head: ptr::null_mut(),
        tail: ptr::null_mut(),
        n: 0,
    };

    /// Its bytes, `n` slots of class `c`.
    pub(crate) fn bytes(&self, c: usize) -> usize {
        self.n as usize * class_size(c)
    }
}

/// One tenant and class: `n` chains in `chains[..n]` (`n == 0`: the entry is free, and `cg`
/// and `c` mean nothing); `stamp`, the table's clock when it was last put to or taken from.
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    pub(crate) cg: ObjCgId,
    pub(crate) c: usize,
    pub(crate) n: usize,
    stamp: u64,
    chains: [Chain; CHAINS],
}

impl Entry {
    pub(crate) const FREE: Entry = Entry {
        cg: 0,
        c: 0,
        n: 0,
        stamp: 0,
        chains: [Chain::NONE; CHAINS],
    };

    /// The chains it holds.
    pub(crate) fn chains(&self) -> &[Chain] {
        &self.chains[..self.n]
    }

    /// The bytes its chains hold.
    fn bytes(&self) -> usize {
        self.chains().iter().map(|ch| ch.bytes(self.c)).sum()
    }
}

/// Invariants (under the lock; [`consistent`] checks them in debug builds): `bytes == Σ
/// entries' bytes <= BYTES_MAX`; `ANY == (some entry has n > 0)`; the [`HINT`] bit of every
/// entry with `n > 0` is set; no two entries with `n > 0` have the same tenant and class.
struct Table {
    entries: [Entry; ENTRIES],
    /// Counts puts and takes: the entries' stamps.
    clock: u64,
    /// The bytes of every chain held: at most [`BYTES_MAX`].
    bytes: usize,
    /// The clock at the last aged release ([`release_all`]).
    idle_seen: u64,
    /// Chains put and chains taken by allocating threads so far (tests).
    put: u64,
    taken: u64,
}

impl Table {
    /// Takes entry `i` (one holding chains) out: freed, its bytes and hint bit gone.
    fn remove(&mut self, i: usize) -> Entry {
        let e = self.entries[i];
        self.entries[i].n = 0;
        self.bytes -= e.bytes();
        rehint(self, e.cg, e.c);
        e
    }
}

// SAFETY: the chains are free slots that only the lock's holder touches (through their
// links); the raw pointers in them are not tied to any thread.
unsafe impl Send for Table {}

static TABLE: SpinLock<Table> = SpinLock::new(Table {
    entries: [Entry::FREE; ENTRIES],
    clock: 0,
    bytes: 0,
    idle_seen: 0,
    put: 0,
    taken: 0,
});

/// Bit `hint_bit(cg, c)` of this 4,096-bit map is set while an entry whose tenant and class
/// hash to it holds chains (written under the lock). Read without it: a stale set bit, or
/// another tenant and class with the same hash (with 64 entries, one chance in 64 at most),
/// costs a look under the lock; a bit not seen yet, one more charge.
static HINT: [AtomicU64; HINT_WORDS] = [const { AtomicU64::new(0) }; HINT_WORDS];

/// Whether any entry holds chains (written under the lock): a program that never hands
/// anything back (no thread frees another's objects in bulk) pays one load and a branch on
/// its charging allocations, not the hint's hash.
static ANY: AtomicBool = AtomicBool::new(false);

/// The word of [`HINT`] and the bit in it for tenant `cg` and class `c` (a multiplicative
/// hash of both, its top 12 bits).
#[inline(always)]
fn hint_bit(cg: ObjCgId, c: usize) -> (usize, u64) {
    let h = (u64::from(cg) << 6 | c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52;
    ((h >> 6) as usize % HINT_WORDS, 1 << (h & 63))
}

/// Re-derives the hint bit of `cg` and class `c` from the entries (under the lock).
fn rehint(t: &Table, cg: ObjCgId, c: usize) {
    if !t.entries.iter().any(|e| e.n > 0) {
        ANY.store(false, Ordering::Relaxed);
    }
    let (w, bit) = hint_bit(cg, c);
    let held = t
        .entries
        .iter()
        .any(|e| e.n > 0 && hint_bit(e.cg, e.c) == (w, bit));
    let bits = HINT[w].load(Ordering::Relaxed);
    let want = if held { bits | bit } else { bits & !bit };
    if want != bits {
        HINT[w].store(want, Ordering::Relaxed);
    }
}

/// Leaves `chain` (class `c`, charged to `cg`: module docs) for the next thread that
/// allocates class `c` for `cg`; false when it was not taken (the tenant and class have a
/// full entry, the tenant is dead, or no room was made): the caller gives it back. To make
/// room (no entry free, or [`BYTES_MAX`] reached) the entry least recently used of another
/// tenant or class goes into `evicted` (its `n > 0` then), whose chains the caller gives
/// back, taken or not.
///
/// # Safety
/// `chain` is as the module docs say (its owner words cleared), and the caller gives its
/// slots up; their charged bytes hold refs on `cg`'s objcg.
pub(crate) unsafe fn put(cg: ObjCgId, c: usize, chain: Chain, evicted: &mut Entry) -> bool {
    debug_assert!(cg != 0 && chain.n > 0 && !chain.head.is_null() && !chain.tail.is_null());
    let mut t = TABLE.lock();
    t.clock += 1;
    t.put += 1;
    let now = t.clock;
    let mut at = None;
    let mut free = None;
    for (i, e) in t.entries.iter().enumerate() {
        if e.n > 0 && e.cg == cg && e.c == c {
            at = Some(i);
            break;
        }
        if e.n == 0 && free.is_none() {
            free = Some(i);
        }
    }
    if at.is_some_and(|i| t.entries[i].n == CHAINS) {
        return false;
    }
    let fits = |t: &Table, free: Option<usize>| {
        (at.is_some() || free.is_some()) && t.bytes + chain.bytes(c) <= BYTES_MAX
    };
    if !fits(&t, free) {
        let lru = (0..ENTRIES)
            .filter(|&i| t.entries[i].n > 0 && Some(i) != at)
            .min_by_key(|&i| t.entries[i].stamp);
        if let Some(v) = lru {
            *evicted = t.remove(v);
            free = free.or(Some(v));
        }
        if !fits(&t, free) {
            return false;
        }
    }
    let Some(i) = at.or(free) else {
        return false;
    };
    let e = &mut t.entries[i];
    if e.n == 0 {
        (e.cg, e.c) = (cg, c);
    }
    e.chains[e.n] = chain;
    e.n += 1;
    e.stamp = now;
    t.bytes += chain.bytes(c);
    // Written under the lock only: a load and a store, no read-modify-write.
    let (w, bit) = hint_bit(cg, c);
    HINT[w].store(HINT[w].load(Ordering::Relaxed) | bit, Ordering::Relaxed);
    ANY.store(true, Ordering::Relaxed);
    // The tenant may have died since the caller looked: checked after the hint is set, in
    // the objcg's read section (`objcg::creator_alive`), which a death's re-pointing waits
    // out before it calls `forget`. So either this read sees the death (the chain goes
    // back), or the death's wait follows the section's end and its `forget` sees the hint
    // and takes the lock after this put: no dead tenant's chain waits here for a sweep.
    // SAFETY: the chain's charged bytes hold refs on cg's objcg (caller's contract).
    if !unsafe { hooks::objcg_tenant_alive(cg) } {
        let e = &mut t.entries[i];
        e.n -= 1;
        t.bytes -= chain.bytes(c);
        rehint(&t, cg, c);
        debug_assert!(consistent(&t));
        return false;
    }
    // A refused charge of cg's subtree skips its drain when nothing of it was stocked since
    // the last complete drain: this chain was. Under the lock, so a drain that released the
    // table before the chain came here reads this note after it and is not clean for cg.
    // SAFETY: the chain's charged bytes hold refs on cg's objcg (caller's contract).
    unsafe { hooks::note_object_stock(cg) };
    debug_assert!(consistent(&t));
    true
}

/// The table's invariants (its docs), for `debug_assert!`.
fn consistent(t: &Table) -> bool {
    let held = t.entries.iter().filter(|e| e.n > 0);
    let bytes: usize = held.clone().map(Entry::bytes).sum();
    bytes == t.bytes
        && bytes <= BYTES_MAX
        && ANY.load(Ordering::Relaxed) == held.clone().next().is_some()
        && held.clone().all(|e| {
            let (w, bit) = hint_bit(e.cg, e.c);
            HINT[w].load(Ordering::Relaxed) & bit != 0
        })
        && held
            .clone()
            .enumerate()
            .all(|(i, e)| held.clone().skip(i + 1).all(|f| (f.cg, f.c) != (e.cg, e.c)))
}

/// Whether the table may hold chains of class `c` for `cg` (one relaxed load: a hint).
#[inline(always)]
pub(crate) fn hinted(cg: ObjCgId, c: usize) -> bool {
    ANY.load(Ordering::Relaxed) && {
        let (w, bit) = hint_bit(cg, c);
        HINT[w].load(Ordering::Relaxed) & bit != 0
    }
}

/// Takes the newest chain of class `c` charged to `cg` when it has at most `room` slots
/// (an older, shorter one of the entry is not looked at: `None`). The caller then owns the
/// slots, charged to `cg` (module docs).
pub(crate) fn take(cg: ObjCgId, c: usize, room: u32) -> Option<Chain> {
    let mut t = TABLE.lock();
    t.clock += 1;
    let now = t.clock;
    let e = t
        .entries
        .iter_mut()
        .find(|e| e.n > 0 && e.cg == cg && e.c == c)?;
    let chain = e.chains[e.n - 1];
    if chain.n > room {
        return None;
    }
    e.n -= 1;
    e.stamp = now;
    let emptied = e.n == 0;
    t.taken += 1;
    t.bytes -= chain.bytes(c);
    if emptied {
        rehint(&t, cg, c);
    }
    debug_assert!(consistent(&t));
    Some(chain)
}

/// Gives back every entry's chains (only those not used since the last such call, for the
/// decay: `aged`): uncharged from their tenants, to their slabs. One entry at a time, each
/// out of the table before its chains are given back. Drains of the stocks start here
/// (`thread_cache::drain_object_stocks`), as do `trim()` and the decay sweep (`aged`).
///
/// One pass over the table's indices (an entry never moves), so every entry it held when
/// the release began is reached, unless a taker or another release takes it first. An
/// entry put meanwhile at an index already passed stays: it is newer than the release
/// (`put` notes its tenant as stocked, at the drain's generation or later, so a refusal
/// does not take that tenant for clean). Taking the lowest entry again and again
/// instead, with a bound on the passes, let a thread that kept putting chains during a
/// drain fill the lowest index each time and use the passes up, leaving entries that were
/// there before the drain charged after it: `current_exact()` read them, and a refusal
/// skipped the drain that would have given them back.
pub(crate) fn release_all(aged: bool) {
    let since = {
        let mut t = TABLE.lock();
        let since = t.idle_seen;
        if aged {
            t.idle_seen = t.clock;
        }
        since
    };
    let mut from = 0;
    while let Some((i, e)) = take_entry_from(from, |e| !(aged && e.stamp > since)) {
        release(e.cg, e.c, e.chains(), None);
        after_release_pass();
        from = i + 1;
    }
}

/// Takes out of the table the first entry at index `from` or above holding chains that
/// `pick` accepts (under the lock, which it drops before returning), with its index: the
/// caller gives its chains back.
fn take_entry_from(from: usize, pick: impl Fn(&Entry) -> bool) -> Option<(usize, Entry)> {
    let mut t = TABLE.lock();
    let i = (from..ENTRIES).find(|&i| t.entries[i].n > 0 && pick(&t.entries[i]))?;
    let e = t.remove(i);
    debug_assert!(consistent(&t));
    Some((i, e))
}

/// A test's function run after each entry [`release_all`] gives back (0: none), so that a
/// test can put chains in the middle of a release (`testing::set_handback_release_hook`).
static RELEASE_HOOK: AtomicUsize = AtomicUsize::new(0);

/// Sets (or clears) [`RELEASE_HOOK`].
pub(crate) fn set_release_hook(f: Option<fn()>) {
    RELEASE_HOOK.store(f.map_or(0, |f| f as usize), Ordering::Release);
}

/// Runs the test's [`RELEASE_HOOK`], if any: one load per entry released otherwise.
fn after_release_pass() {
    let h = RELEASE_HOOK.load(Ordering::Acquire);
    if h != 0 {
        // SAFETY: RELEASE_HOOK holds 0 or a `fn()` stored by `set_release_hook`.
        let f = unsafe { core::mem::transmute::<usize, fn()>(h) };
        f();
    }
}

/// Registered with the accounting (`hooks::set_on_death`): tenant `cg` died, so its
/// entries go back at once (uncharged from its parent now, where its objcg points) instead
/// of waiting for a sweep or an eviction: nobody allocates for it any more, and their
/// bytes' refs keep its objcg from being freed and its id from being recycled (a tenant per
/// request would otherwise keep up to [`ENTRIES`] dead objcgs and 4 MiB here). With nothing
/// here for `cg` (most deaths), the hint's bits for its classes are all it reads. A chain
/// put meanwhile is seen here or refused ([`put`] checks the tenant after it sets the hint).
/// Called before the death drops the objcg's alive ref, so `cg` is not yet another
/// tenant's.
pub(crate) fn forget(cg: ObjCgId) {
    // A tenant per request dies per request, mostly with nothing here: one load, no frame.
    if ANY.load(Ordering::Relaxed) {
        forget_held(cg);
    }
}

/// [`forget`] once the table holds something.
#[cold]
#[inline(never)]
fn forget_held(cg: ObjCgId) {
    let hinted = (0..NUM_CLASSES).any(|c| {
        let (w, bit) = hint_bit(cg, c);
        HINT[w].load(Ordering::Relaxed) & bit != 0
    });
    if !hinted {
        return;
    }
    // `put` refuses a dead tenant's chains, so none comes in behind this.
    while let Some((_, e)) = take_entry_from(0, |e| e.cg == cg) {
        release(e.cg, e.c, e.chains(), None);
    }
}

/// Gives back `chains` of class `c`, charged to `cg`, taken out of the table (or never let
/// in): uncharged from `cg` (a dead tenant's charge is its parent's by then: the uncharge
/// follows it), into `bin` (a bin of uncharged slots of class `c` of the calling thread) as
/// far as it has room, the rest to the slabs. Their owner words are 0 already.
pub(crate) fn release(cg: ObjCgId, c: usize, chains: &[Chain], bin: Option<&Bin>) {
    for ch in chains {
        // SAFETY: the chain's slots are charged to cg with class_size(c) each (module docs),
        // and the table, which held them, gave them up (or the caller, who never let it in).
        unsafe { hooks::uncharge(cg, ch.bytes(c), StatIdx::slab(c)) };
        let (mut o, mut rest) = (ch.head, ch.n as usize);
        if let Some(bin) = bin {
            while rest > 0 {
                // SAFETY: o is a free slot on the chain; its link is read before the push
                // rewrites it.
                let next = unsafe { FreeObj::next(o) };
                // SAFETY: an uncharged free slot of class c's accounted cache, its word 0,
                // handed to the bin by the thread that owns it (caller's contract).
                if !unsafe { bin.push(o as *mut u8) } {
                    break;
                }
                o = next;
                rest -= 1;
            }
        }
        if rest > 0 {
            // SAFETY: the chain's last `rest` free slots of class c's accounted cache,
            // uncharged, their words 0, linked from o to the null link at ch.tail.
            unsafe { class_caches::cache(c, Kind::Accounted).flush(o, rest) };
        }
    }
}

/// Adds the slots the table holds to `per_class[c]`, class by class (`stats()`: they are
/// free slots, cached like a tagged bin's, not objects the program holds).
pub(crate) fn add_slots(per_class: &mut [usize; NUM_CLASSES]) {
    let t = TABLE.lock();
    for e in t.entries.iter().filter(|e| e.n > 0) {
        per_class[e.c] += e.chains().iter().map(|ch| ch.n as usize).sum::<usize>();
    }
}

/// What the table holds now, and what passed through it so far (tests).
pub(crate) fn counts() -> Counts {
    let t = TABLE.lock();
    Counts {
        chains: t.entries.iter().map(|e| e.n).sum(),
        bytes: t.bytes,
        put: t.put,
        taken: t.taken,
    }
}

/// What `counts` reports.
#[derive(Clone, Copy, Debug)]
pub struct Counts {
    /// Chains held now.
    pub chains: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Chains offered so far, refused ones included.
    pub put: u64,
    /// Chains allocating threads took so far.
    pub taken: u64,
}

/// `BYTES_MAX` (tests).
pub const BYTES_BOUND: usize = BYTES_MAX;

/// Fork support: the lock is held across `fork` (taken last: nothing is called under it).
pub(crate) fn fork_prepare() {
    TABLE.lock_raw();
}

/// Fork support, both sides: the child keeps the chains (their slots and charges are the
/// child's copies).
///
/// # Safety
/// After [`fork_prepare`] in this thread (or, in the child, its copy).
pub(crate) unsafe fn fork_release() {
    // SAFETY: forwarded contract.
    unsafe { TABLE.unlock_raw() };
}
