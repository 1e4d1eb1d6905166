//! `cache_scratch [THREADS] [KNOB]`: see `slabcg_bench_suite::workloads::cache`.
use slabcg_bench_suite::cli;
use slabcg_bench_suite::workloads::cache;

fn main() {
    let a = cli::parse(
        "cache_scratch",
        "THREADS: threads; KNOB: writes per byte of each 8-byte object (1000 objects per thread)",
        2,
        250_000,
    );
    let cfg = cache::Config::bench(a.threads, a.knob, true);
    cli::main_with("cache_scratch", &a, || cache::run(&cfg));
}
