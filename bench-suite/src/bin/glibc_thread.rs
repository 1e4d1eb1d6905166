//! `glibc_thread [THREADS] [KNOB]`: see `slabcg_bench_suite::workloads::glibc_thread`.
use slabcg_bench_suite::cli;
use slabcg_bench_suite::workloads::glibc_thread;

fn main() {
    let a = cli::parse(
        "glibc_thread",
        "THREADS: threads; KNOB: steps per thread (1024 slots, sizes 4..32768 B skewed small)",
        2,
        5_000_000,
    );
    let cfg = glibc_thread::Config {
        threads: a.threads,
        iterations: a.knob,
        seed: 2024,
    };
    cli::main_with("glibc_thread", &a, || glibc_thread::run(&cfg));
}
