//! `malloc_large [THREADS] [KNOB]`: see `slabcg_bench_suite::workloads::malloc_large`.
use slabcg_bench_suite::cli;
use slabcg_bench_suite::workloads::malloc_large;

fn main() {
    let a = cli::parse(
        "malloc_large",
        "THREADS: threads; KNOB: blocks per thread (5..25 MiB, 8 live, every page touched)",
        1,
        500,
    );
    let cfg = malloc_large::Config::bench(a.threads, a.knob);
    cli::main_with("malloc_large", &a, || malloc_large::run(&cfg));
}
