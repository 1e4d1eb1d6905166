//! libslabcg.so from C: the malloc family's semantics (a C program run with the library
//! preloaded, and once against the C library as the reference), fork / dlopen / thread exit,
//! the C tenant API example, and real programs (python3, sh pipelines, sqlite3) whose output
//! must match the system allocator's.
//!
//! Cargo does not build a cdylib for its package's integration tests, so the first test to
//! need the library runs `cargo build -p slabcg-capi` with the same profile, in a target
//! directory of its own (`<target>/capi-lib`): building in the outer one could rebuild a
//! dependency that the outer run's doctests are still to link against (when a source
//! changed meanwhile), and the outer cargo's artifacts stay as it left them.
//! The C programs are compiled with `gcc`, which the tests require.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The target directory and profile directory this test binary runs from
/// (`<target>/<profile>/deps/<exe>`).
fn dirs() -> (PathBuf, PathBuf) {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary in <target>/<profile>/deps")
        .to_path_buf();
    let target = profile_dir.parent().expect("target dir").to_path_buf();
    (target, profile_dir)
}

/// libslabcg.so, built once per test binary.
fn lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let (target, profile_dir) = dirs();
        let profile = profile_dir
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let own_target = target.join("capi-lib");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-q", "-p", "slabcg-capi", "--target-dir"])
            .arg(&own_target)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            p => {
                cmd.args(["--profile", p]);
            }
        }
        let st = cmd.status().expect("run cargo build -p slabcg-capi");
        assert!(st.success(), "cargo build -p slabcg-capi failed");
        let so = own_target.join(&profile).join("libslabcg.so");
        assert!(so.exists(), "{} missing after the build", so.display());
        so
    })
}

/// A scratch directory for one test's binaries.
fn scratch(name: &str) -> PathBuf {
    let d = dirs().1.join("capi-tests").join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles C sources with gcc into `out`; panics with gcc's messages on failure.
fn gcc(out: &Path, args: &[&str]) {
    compile("gcc", out, args)
}

/// Compiles with `compiler` (gcc or g++) into `out`.
fn compile(compiler: &str, out: &Path, args: &[&str]) {
    let o = Command::new(compiler)
        .args(["-O1", "-g", "-Wall", "-pthread", "-fno-builtin"])
        .args(args)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap_or_else(|e| panic!("{compiler} is needed to build the C tests: {e}"));
    assert!(
        o.status.success(),
        "{compiler} {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn src(rel: &str) -> String {
    format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs `cmd` with libslabcg.so preloaded (or not), with a timeout.
fn run(cmd: &mut Command, preload: bool) -> Output {
    cmd.env_remove("LD_PRELOAD");
    if preload {
        cmd.env("LD_PRELOAD", lib());
    }
    let mut timed = Command::new("timeout");
    timed.arg("120").arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => timed.env(k, v),
            None => timed.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        timed.current_dir(d);
    }
    timed.output().expect("spawn")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Builds the semantics program and the dlopen plugin.
fn semantics(name: &str) -> (PathBuf, PathBuf) {
    let d = scratch(name);
    let prog = d.join("semantics");
    let plugin = d.join("plugin.so");
    gcc(
        &prog,
        &[
            &src("tests/c/semantics.c"),
            "-Wno-alloc-size-larger-than",
            "-ldl",
        ],
    );
    gcc(&plugin, &["-shared", "-fPIC", &src("tests/c/plugin.c")]);
    (prog, plugin)
}

const CHECKS: &[&str] = &[
    "ok malloc\n",
    "ok malloc-enomem\n",
    "ok calloc\n",
    "ok realloc\n",
    "ok posix_memalign\n",
    "ok aligned_alloc\n",
    "ok memalign-valloc-pvalloc\n",
    "ok threads-exit\n",
    "ok fork-from-threads\n",
    "ok fork-exec\n",
    "ok dlopen-dlclose\n",
    "ok malloc_stats-trim\n",
    "ALL OK\n",
];

/// The malloc family's C semantics, fork from threads, fork + exec, thread exit and
/// dlopen/dlclose, with slabcg as the process's malloc.
#[test]
fn c_semantics_preloaded() {
    let (prog, plugin) = semantics("semantics-slabcg");
    let o = run(Command::new(&prog).arg(&plugin), true);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.starts_with("allocator slabcg\n"), "{}", text(&o));
    for c in CHECKS.iter().chain(&["ok free_sized\n"]) {
        assert!(out.contains(c), "missing {c:?}: {}", text(&o));
    }
    // malloc_stats prints slabcg's statistics, the size classes in use among them.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("slabcg:\nallocated ") && err.contains("\nclass size objects cached"),
        "{}",
        text(&o)
    );
}

/// The same program against the C library: its checks hold for glibc's malloc too (all but
/// the two that glibc 2.36 does differently, which it skips there), so they test C's
/// semantics, not slabcg's own choices.
#[test]
fn c_semantics_reference_libc() {
    let (prog, plugin) = semantics("semantics-libc");
    let o = run(Command::new(&prog).arg(&plugin), false);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.starts_with("allocator libc\n"), "{}", text(&o));
    for c in CHECKS {
        assert!(out.contains(c), "missing {c:?}: {}", text(&o));
    }
}

/// The C tenant API example: a max refuses malloc with NULL + ENOMEM, current and peak are
/// the usable sizes held, threads entering a tenant first thing, high, nesting, the report
/// text, the Kill policy, the name and path getters (cut snprintf-style), a reclaim
/// callback whose frees let a refused malloc pass, and bad input answered with error codes.
#[test]
fn c_tenant_api_example() {
    let lib = lib();
    let libdir = lib.parent().unwrap().to_str().unwrap().to_owned();
    let d = scratch("tenants");
    let prog = d.join("tenants");
    gcc(
        &prog,
        &[
            &format!("-I{}", src("include")),
            &src("examples/tenants.c"),
            &format!("-L{libdir}"),
            "-lslabcg",
            &format!("-Wl,-rpath,{libdir}"),
        ],
    );
    let o = run(&mut Command::new(&prog), false);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", text(&o));
    for c in [
        "ok limit\n",
        "ok threads\n",
        "ok high-stat-nesting\n",
        "ok kill\n",
        "ok names\n",
        "ok reclaim\n",
        "ok bad-input\n",
        "ALL OK\n",
    ] {
        assert!(out.contains(c), "missing {c:?}: {}", text(&o));
    }
}

/// C++ before main (a static std::map), thread_local objects destroyed at thread exit,
/// exceptions and threads: the same output as with the system allocator.
#[test]
fn cxx_program_matches_the_system_allocator() {
    let d = scratch("cxx");
    let prog = d.join("cxx");
    compile("g++", &prog, &[&src("tests/c/cxx.cpp")]);
    let out = same_output(&[prog.to_str().unwrap()], &d);
    assert_eq!(out, "2 1096006 1\n");
}

/// Runs `args` with and without slabcg preloaded; both must succeed with the same output.
fn same_output(args: &[&str], dir: &Path) -> String {
    let mk = || {
        let mut c = Command::new(args[0]);
        c.args(&args[1..]).current_dir(dir);
        c
    };
    let sys = run(&mut mk(), false);
    let ours = run(&mut mk(), true);
    assert!(sys.status.success(), "{args:?} (system): {}", text(&sys));
    assert!(ours.status.success(), "{args:?} (slabcg): {}", text(&ours));
    assert_eq!(
        String::from_utf8_lossy(&sys.stdout),
        String::from_utf8_lossy(&ours.stdout),
        "{args:?}: outputs differ"
    );
    String::from_utf8_lossy(&ours.stdout).into_owned()
}

const PYTHON: &str = r#"
import json, threading, os, subprocess, hashlib
d = [{"k": str(i) * (i % 50), "v": list(range(i % 30))} for i in range(60000)]
s = json.dumps(d, sort_keys=True)
h = hashlib.sha256(s.encode()).hexdigest()
out = []
def work(n):
    b = [bytearray(1000 + n * k) for k in range(300)]
    out.append(sum(len(x) for x in b))
ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
[t.start() for t in ts]
pid = os.fork()
if pid == 0:
    x = [str(i) * 100 for i in range(20000)]
    os._exit(0 if len(x) == 20000 else 1)
_, st = os.waitpid(pid, 0)
[t.join() for t in ts]
sub = subprocess.run(["sh", "-c", "echo from-child"], capture_output=True).stdout
print(h, len(json.loads(s)), sorted(out), st, sub)
"#;

/// Real programs under LD_PRELOAD print what they print with the system allocator:
/// python3 (json, threads, fork, subprocess), a sh pipeline of coreutils, sqlite3.
#[test]
fn real_programs_match_the_system_allocator() {
    lib();
    let d = scratch("real");
    let py = if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let out = same_output(&[py, "-c", PYTHON], &d);
    assert!(out.contains("from-child"), "{out}");
    let out = same_output(
        &[
            "sh",
            "-c",
            "seq 1 200000 | awk '{print $1 % 977, $1}' | sort -n | uniq -c -w 4 | \
             sort -k2n | tail -3 | md5sum",
        ],
        &d,
    );
    assert_eq!(out.len(), 36, "{out}");
    // sqlite3 is part of the CI image; a machine without it skips this part, saying so.
    if Command::new("sqlite3").arg("-version").output().is_ok() {
        let sql = "create table t(a integer primary key, b text, c real);\
            with recursive s(i) as (select 1 union all select i + 1 from s where i < 100000)\
            insert into t select i, hex(randomblob(0)) || printf('row-%d-%s', i, substr('abcdefghij', 1 + i % 10)), i * 0.5 from s;\
            create index tb on t(b);\
            select count(*), sum(length(b)), total(c) from t;\
            select b from t where b like 'row-7777%' order by b limit 3;\
            select a % 13, count(*) from t group by 1 order by 1 limit 4;";
        same_output(&["sqlite3", ":memory:", sql], &d);
    } else {
        eprintln!("sqlite3 not found: its part of this test did not run");
    }
}

/// The library reads its per-thread words with the initial-exec model (feature `ie-tls`,
/// on by default): the dynamic section says the library needs static TLS, and the words'
/// symbol is a TLS object. Without the feature every malloc and free would call
/// `__tls_get_addr` (BENCHMARKS.md section 9).
#[cfg(all(
    feature = "ie-tls",
    target_arch = "x86_64",
    target_pointer_width = "64",
    target_os = "linux"
))]
#[test]
fn per_thread_words_are_initial_exec() {
    let dynamic = Command::new("readelf")
        .arg("-dW")
        .arg(lib())
        .output()
        .expect("run readelf (binutils, which gcc needs)");
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(
        dynamic
            .lines()
            .any(|l| l.contains("(FLAGS)") && l.contains("STATIC_TLS")),
        "no STATIC_TLS flag:\n{dynamic}"
    );
    let symbols = Command::new("readelf")
        .arg("-sW")
        .arg(lib())
        .output()
        .expect("run readelf");
    let symbols = String::from_utf8_lossy(&symbols.stdout);
    assert!(
        symbols
            .lines()
            .any(|l| l.ends_with(" slabcg_fast_tls") && l.contains(" TLS ")),
        "no TLS symbol slabcg_fast_tls"
    );
}

/// free() of addresses slabcg never handed out ends the process with slabcg's fatal message,
/// not a SIGSEGV: a page-aligned pointer from a direct mmap (whose page below, where a
/// large block's header would be, is unmapped) and a page inside a large block. (A pointer
/// into the middle of a slot is checked at once only by the hardened build:
/// allocator/tests/invalid_free.rs.)
#[test]
fn frees_of_foreign_pointers_are_reported() {
    use std::os::unix::process::ExitStatusExt;
    let d = scratch("invalid-free");
    let prog = d.join("invalid_free");
    gcc(&prog, &[&src("tests/c/invalid_free.c")]);
    for (mode, msg) in [
        (
            "mmap",
            "slabcg: fatal: free of a pointer that slabcg did not allocate",
        ),
        (
            "large",
            "slabcg: fatal: free of a pointer that slabcg did not allocate",
        ),
    ] {
        let o = run(Command::new(&prog).arg(mode), true);
        let err = String::from_utf8_lossy(&o.stderr);
        // `timeout` passes the child's death by SIGABRT on as that signal or as 128 + 6.
        let aborted = o.status.signal() == Some(libc::SIGABRT)
            || o.status.code() == Some(128 + libc::SIGABRT);
        assert!(aborted, "{mode}: not an abort: {}", text(&o));
        assert!(err.contains(msg), "{mode}: {}", text(&o));
    }
}
