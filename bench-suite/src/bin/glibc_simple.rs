//! `glibc_simple [THREADS] [KNOB]`: see `slabcg_bench_suite::workloads::glibc_simple`.
use slabcg_bench_suite::cli;
use slabcg_bench_suite::workloads::glibc_simple;

fn main() {
    let a = cli::parse(
        "glibc_simple",
        "THREADS: independent threads; KNOB: passes (7 sizes 16..1024 B x batches of 1/25/100/400)",
        1,
        2_000,
    );
    let cfg = glibc_simple::Config {
        threads: a.threads,
        iterations: a.knob,
    };
    cli::main_with("glibc_simple", &a, || glibc_simple::run(&cfg));
}
