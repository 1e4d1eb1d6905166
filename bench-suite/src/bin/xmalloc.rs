//! `xmalloc [THREADS] [KNOB]`: see `slabcg_bench_suite::workloads::xmalloc`.
use slabcg_bench_suite::cli;
use slabcg_bench_suite::workloads::xmalloc;

fn main() {
    let a = cli::parse("xmalloc", "THREADS: producers (plus as many consumers); KNOB: objects per producer (8..512 B, batches of 64)", 2, 6_000_000);
    let cfg = xmalloc::Config::bench(a.threads, a.knob);
    cli::main_with("xmalloc", &a, || xmalloc::run(&cfg));
}
