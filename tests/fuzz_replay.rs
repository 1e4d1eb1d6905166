//! The fuzz target's bounded run (`fuzz/fuzz_targets/model.rs`, same interpreter and model:
//! `tests/common/fuzz_model.rs`): every input of the committed corpus
//! (`fuzz/corpus/model/`), then pseudo-random action streams from a fixed seed. The long
//! run is `scripts/fuzz.sh`.

use std::io::Write;
use std::path::Path;

use slabcg::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[path = "common/fuzz_model.rs"]
mod fuzz_model;

thread_local! {
    /// The input this thread is running, for the panic message.
    static RUNNING: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Runs `input`; a disagreement ends the process with the input's name and the message
/// (the model's state, scopes entered and blocks live, cannot unwind cleanly).
fn replay(name: &str, input: &[u8]) -> fuzz_model::Stats {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let name = RUNNING.with(|r| r.borrow().clone());
            let trace = std::backtrace::Backtrace::force_capture();
            // Straight to stderr: the harness's capture of eprintln! dies with the process.
            let _ = writeln!(std::io::stderr(), "fuzz input {name}: {info}\n{trace}");
            std::process::abort();
        }))
    });
    RUNNING.with(|r| *r.borrow_mut() = format!("{name} ({} bytes)", input.len()));
    fuzz_model::run(input)
}

#[test]
fn corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/model");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus in {}", dir.display());
    let mut total = fuzz_model::Stats::default();
    for f in &files {
        let s = replay(&f.display().to_string(), &std::fs::read(f).unwrap());
        total.actions += s.actions;
        total.refused += s.refused;
        total.reclaims += s.reclaims;
        total.checks += s.checks;
    }
    eprintln!("{} corpus inputs: {total:?}", files.len());
    assert!(total.refused > 0 && total.reclaims > 0, "{total:?}");
}

#[test]
fn random_streams() {
    let mut total = fuzz_model::Stats::default();
    for i in 0..300u64 {
        let input = fuzz_model::random_input(0x5eed_f022 + i * 0x9e37_79b9, 3000);
        let s = replay(&format!("random #{i}"), &input);
        total.actions += s.actions;
        total.refused += s.refused;
        total.reclaims += s.reclaims;
        total.checks += s.checks;
    }
    eprintln!("random streams: {total:?}");
    assert!(total.refused > 0 && total.checks > 0, "{total:?}");
}
