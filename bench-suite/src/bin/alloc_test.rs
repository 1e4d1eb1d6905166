//! `alloc_test [THREADS] [KNOB]`: see `slabcg_bench_suite::workloads::alloc_test`.
use slabcg_bench_suite::cli;
use slabcg_bench_suite::workloads::alloc_test;

fn main() {
    let a = cli::parse(
        "alloc_test",
        "THREADS: threads; KNOB: steps per thread (8192 slots, Pareto sizes 16 B..64 KiB)",
        2,
        15_000_000,
    );
    let cfg = alloc_test::Config::bench(a.threads, a.knob);
    cli::main_with("alloc_test", &a, || alloc_test::run(&cfg));
}
