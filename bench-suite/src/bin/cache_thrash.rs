//! `cache_thrash [THREADS] [KNOB]`: see `slabcg_bench_suite::workloads::cache`.
use slabcg_bench_suite::cli;
use slabcg_bench_suite::workloads::cache;

fn main() {
    let a = cli::parse(
        "cache_thrash",
        "THREADS: threads; KNOB: writes per byte of each 8-byte object (1000 objects per thread)",
        2,
        250_000,
    );
    let cfg = cache::Config::bench(a.threads, a.knob, false);
    cli::main_with("cache_thrash", &a, || cache::run(&cfg));
}
