//! Per-thread words in the initial-exec TLS model, for a build of slabcg as a shared library
//! (feature `ie-tls`; `slabcg-capi` turns it on).
//!
//! Rust's `thread_local!` in a shared object uses the general-dynamic model: every access
//! calls `__tls_get_addr`, about 17 instructions, three times per C `malloc`+`free` pair
//! (BENCHMARKS.md section 9). Stable Rust has no way to ask for another model, so this file
//! defines its words itself, in assembly, in the `.tbss` section, and reads them with the
//! initial-exec sequence: the word's offset from the thread pointer from the GOT, then one
//! `%fs`-relative load. That is what mimalloc and jemalloc do in their shared libraries.
//!
//! The model puts the library's whole TLS segment (about 11 KiB, the thread cache included,
//! not only these 16 bytes) in the static TLS block: true for `LD_PRELOAD` and for a program
//! linked against the library; a `dlopen` of the library, or of a plugin linked against it,
//! fails ("cannot allocate memory in static TLS block") unless glibc's surplus is raised
//! (`GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384`), as with jemalloc's library.
//! In an executable the linker turns the sequence into a constant offset, so the words work
//! there too (the workspace's tests build them when cargo unifies the feature).
//!
//! Without the feature, on other architectures, under Miri and under loom, the words are a
//! `thread_local!`; [`AVAILABLE`] says which. x32 (32-bit pointers, 4-byte GOT entries) gets
//! the fallback too.

/// One per-thread word. Each has one client, named here so that two clients never share a
/// word by mistake; every word starts at 0 on every thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    /// The allocator's thread cache, once the thread has touched it (0 until then): set once
    /// per thread and never changed, so it may be read with [`get_stable`].
    ThreadCache = 0,
    /// The accounting's current scope (its objcg id; 0 is the root).
    Scope = 1,
}

/// Whether the words are initial-exec TLS in this build (otherwise a `thread_local!`).
pub const AVAILABLE: bool = imp::INITIAL_EXEC;

#[cfg(all(
    feature = "ie-tls",
    target_arch = "x86_64",
    target_pointer_width = "64",
    target_os = "linux",
    not(miri),
    not(loom)
))]
mod imp {
    use super::Word;

    pub(super) const INITIAL_EXEC: bool = true;

    // Two zeroed words in the thread-local bss. Hidden: the symbol is the library's own,
    // never interposed, so the linker may resolve the offset at link time where it can.
    core::arch::global_asm!(
        ".pushsection .tbss.slabcg_fast_tls,\"awT\",@nobits",
        ".p2align 4",
        ".globl slabcg_fast_tls",
        ".hidden slabcg_fast_tls",
        ".type slabcg_fast_tls, @tls_object",
        ".size slabcg_fast_tls, 16",
        "slabcg_fast_tls:",
        ".zero 16",
        ".popsection",
    );

    /// The word at byte offset `$off` of `slabcg_fast_tls` on this thread, read by one asm
    /// block with the given options; `set_word!` writes it.
    macro_rules! get_word {
        ($off:literal, $($opt:ident),+) => {{
            let v: usize;
            core::arch::asm!(
                "mov {off}, qword ptr [rip + slabcg_fast_tls@GOTTPOFF]",
                concat!("mov {v}, qword ptr fs:[{off} + ", $off, "]"),
                off = out(reg) _, v = out(reg) v,
                options(nostack, preserves_flags, $($opt),+),
            );
            v
        }};
    }

    macro_rules! set_word {
        ($off:literal, $v:expr) => {
            core::arch::asm!(
                "mov {off}, qword ptr [rip + slabcg_fast_tls@GOTTPOFF]",
                concat!("mov qword ptr fs:[{off} + ", $off, "], {v}"),
                off = out(reg) _, v = in(reg) $v,
                options(nostack, preserves_flags),
            )
        };
    }

    #[inline(always)]
    pub(super) fn get_stable(w: Word) -> usize {
        match w {
            // SAFETY: as in `get`. `nomem` lets the compiler reuse an earlier read: sound for
            // the thread cache's word, which never changes once set. Strictly, Rust's
            // reference calls a `pure` block whose output changes undefined; this relies on
            // LLVM's treatment of such a block (a value it may reuse or hoist, never invent),
            // the same as it gives a `thread_local!`'s address. A reused 0 only means one
            // more call of the caller's slow path; a reused non-zero is the same thread's
            // cache, since one call of the allocator runs on one thread (no callbacks, no
            // await inside).
            Word::ThreadCache => unsafe { get_word!("0", nomem, pure) },
            // The scope word changes all the time: never a reused read.
            Word::Scope => get(Word::Scope),
        }
    }

    #[inline(always)]
    pub(super) fn get(w: Word) -> usize {
        // SAFETY: reads the GOT entry holding the offset of `slabcg_fast_tls` from the thread
        // pointer (resolved by the dynamic linker before any code of the library runs), then
        // the word at that offset in the calling thread's static TLS block: 16 bytes this
        // file defines, alive as long as the thread. No other memory is touched.
        unsafe {
            match w {
                Word::ThreadCache => get_word!("0", readonly, pure),
                Word::Scope => get_word!("8", readonly, pure),
            }
        }
    }

    #[inline(always)]
    pub(super) fn set(w: Word, v: usize) {
        // SAFETY: as in `get`; writes the calling thread's own word, which no other thread
        // reads.
        unsafe {
            match w {
                Word::ThreadCache => set_word!("0", v),
                Word::Scope => set_word!("8", v),
            }
        }
    }
}

#[cfg(not(all(
    feature = "ie-tls",
    target_arch = "x86_64",
    target_pointer_width = "64",
    target_os = "linux",
    not(miri),
    not(loom)
)))]
mod imp {
    use super::Word;
    use core::cell::Cell;

    pub(super) const INITIAL_EXEC: bool = false;

    std::thread_local! {
        static WORDS: [Cell<usize>; 2] = const { [Cell::new(0), Cell::new(0)] };
    }

    #[inline(always)]
    pub(super) fn get(w: Word) -> usize {
        WORDS.with(|a| a[w as usize].get())
    }

    #[inline(always)]
    pub(super) fn get_stable(w: Word) -> usize {
        get(w)
    }

    #[inline(always)]
    pub(super) fn set(w: Word, v: usize) {
        WORDS.with(|a| a[w as usize].set(v))
    }
}

/// The calling thread's word `w` (0 until this thread sets it).
#[inline(always)]
pub fn get(w: Word) -> usize {
    imp::get(w)
}

/// As [`get`], but for [`Word::ThreadCache`], which goes at most once per thread from 0 to
/// its final value, the compiler may reuse an earlier read: a caller may still see 0 just
/// after setting it, and must then take its slow path again, which finds the word set. Three
/// reads in one `free` become one. Any other word is read as [`get`] reads it.
#[inline(always)]
pub fn get_stable(w: Word) -> usize {
    imp::get_stable(w)
}

/// Sets the calling thread's word `w`; no other thread sees it.
///
/// # Safety
/// Only the word's one client (named on [`Word`]) may set it, with a value that client's
/// readers accept: the thread cache's address, once per thread (readers dereference it), or
/// an objcg id its scope protocol installs (readers charge through it).
#[inline(always)]
pub unsafe fn set(w: Word, v: usize) {
    imp::set(w, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_per_thread_and_start_at_zero() {
        assert_eq!(get(Word::ThreadCache), 0);
        assert_eq!(get(Word::Scope), 0);
        // SAFETY: nothing of slabcg runs on this test thread, which puts the words back.
        unsafe {
            set(Word::ThreadCache, 0xdead_beef);
            set(Word::Scope, 7);
        }
        assert_eq!(get(Word::ThreadCache), 0xdead_beef);
        assert_eq!(get(Word::Scope), 7);
        std::thread::spawn(|| {
            assert_eq!(get(Word::ThreadCache), 0);
            assert_eq!(get(Word::Scope), 0);
            // SAFETY: as above.
            unsafe { set(Word::Scope, 9) };
            assert_eq!(get(Word::Scope), 9);
        })
        .join()
        .unwrap();
        assert_eq!(get(Word::Scope), 7);
        // SAFETY: as above.
        unsafe {
            set(Word::ThreadCache, 0);
            set(Word::Scope, 0);
        }
    }
}
