//! `larson [THREADS] [KNOB]`: see `slabcg_bench_suite::workloads::larson`.
use slabcg_bench_suite::cli;
use slabcg_bench_suite::workloads::larson;

fn main() {
    let a = cli::parse("larson", "THREADS: concurrent lanes; KNOB: replacements per thread (20 threads per lane, 2000 objects of 8..1000 B per lane)", 2, 500_000);
    let cfg = larson::Config::bench(a.threads, a.knob);
    cli::main_with("larson", &a, || larson::run(&cfg));
}
