//! Tests that run in a child process of their own: the test binary runs itself with
//! `--exact NAME` and `SLABCG_CHILD=NAME`, and the child does the work (for process-wide
//! figures such as RSS, or for checks that must end the process).

use std::process::Command;

/// Whether this process is the child that runs `test`.
pub fn is_child(test: &str) -> bool {
    std::env::var("SLABCG_CHILD").as_deref() == Ok(test)
}

/// Runs `test` in a child process that must succeed and print `CHILD-OK`.
#[allow(dead_code)] // not every includer has tests that must succeed
pub fn run_child(test: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("SLABCG_CHILD", test)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{test} failed:\n{text}");
    assert!(text.contains("CHILD-OK"), "{test} did not run:\n{text}");
}

/// Runs `test` in a child process that must die with `message` on stderr, within two
/// minutes: a corruption the allocator fails to detect may leave the child walking a looped
/// list for ever, and the test should fail rather than hang.
#[allow(dead_code)] // not every includer has tests that must fail
pub fn run_child_expect_fatal(test: &str, message: &str) {
    run_child_expect_fatal_one_of(test, &[message]);
}

/// [`run_child_expect_fatal`] where either of several checks may report the fault first
/// (a hardened build checks every free; a default build finds the fault later).
#[allow(dead_code)] // not every includer has tests that must fail
pub fn run_child_expect_fatal_one_of(test: &str, messages: &[&str]) {
    use std::io::Read;
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env("SLABCG_CHILD", test)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The child's stderr is read on a thread of its own, so that a child writing more than a
    // pipe holds does not block while this thread waits for it to exit.
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut err = Vec::new();
        pipe.read_to_end(&mut err).unwrap();
        err
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        // A watchdog, not a timing: it fires only for a child that never exits (a fatal
        // check takes milliseconds), so that a missed detection fails instead of hanging.
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{test}: the child hung (killed after 120 s)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let err = reader.join().unwrap();
    let err = String::from_utf8_lossy(&err);
    assert!(!status.success(), "{test}: the child survived");
    assert!(
        messages.iter().any(|m| err.contains(m)),
        "{test}: stderr: {err}"
    );
}
