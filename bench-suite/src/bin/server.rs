//! `server [THREADS] [KNOB]`: see `slabcg_bench_suite::workloads::server`.
use slabcg_bench_suite::cli;
use slabcg_bench_suite::workloads::server;

fn main() {
    let a = cli::parse(
        "server",
        "THREADS: workers; KNOB: requests per worker (48 objects of 8 B-32 KiB, a 16-entry map of strings, a quarter handed on)",
        2,
        200_000,
    );
    let cfg = server::Config::bench(a.threads, a.knob);
    cli::main_with("server", &a, || server::run(&cfg));
}
