//! `mstress [THREADS] [KNOB]`: see `slabcg_bench_suite::workloads::mstress`.
use slabcg_bench_suite::cli;
use slabcg_bench_suite::workloads::mstress;

fn main() {
    let a = cli::parse(
        "mstress",
        "THREADS: threads per round (10 rounds); KNOB: actions per thread",
        2,
        300_000,
    );
    let cfg = mstress::Config::bench(a.threads, a.knob);
    cli::main_with("mstress", &a, || mstress::run(&cfg));
}
