//! `rptest [THREADS] [KNOB]`: see `slabcg_bench_suite::workloads::rptest`.
use slabcg_bench_suite::cli;
use slabcg_bench_suite::workloads::rptest;

fn main() {
    let a = cli::parse("rptest", "THREADS: threads; KNOB: loops of 64 replacements per thread (2000-object working sets, 8..16000 B, 25% freed by the next thread)", 2, 30_000);
    let cfg = rptest::Config::bench(a.threads, a.knob);
    cli::main_with("rptest", &a, || rptest::run(&cfg));
}
