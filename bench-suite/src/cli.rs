//! Command line of every workload program: `PROG [THREADS] [KNOB]`.
//!
//! THREADS and KNOB (the workload's main size/iteration count) default to per-program values.
//! The environment variable `BENCH_SCALE_PCT` (default 100) scales the default KNOB, so the
//! runner can shorten every workload at once. Each program prints one line
//! `RESULT workload=.. allocator=.. threads=.. knob=.. ops=.. elapsed_s=.. verified=ok`
//! and exits 0, or prints `FAILED ...` on stderr and exits 1.

use std::time::Instant;

/// What a workload reports back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Allocations performed.
    pub allocs: u64,
    /// Frees performed (must equal `allocs` at the end).
    pub frees: u64,
}

impl Outcome {
    /// Sum of two outcomes.
    pub fn add(&mut self, o: &Outcome) {
        self.allocs += o.allocs;
        self.frees += o.frees;
    }

    /// Counts one free whose stamp check said `intact`; returns 1 for a damaged object, for
    /// the caller's corruption tally.
    pub fn freed(&mut self, intact: bool) -> u64 {
        self.frees += 1;
        u64::from(!intact)
    }
}

/// Result of a workload: the counts, or what failed verification.
pub type WorkResult = Result<Outcome, String>;

/// Joins worker threads that each return their counts and corruption tally, and adds them
/// to `total` / `corrupt`. Panics (naming the workload) if a worker panicked.
pub fn join_workers<'s>(
    name: &str,
    handles: Vec<std::thread::ScopedJoinHandle<'s, (Outcome, u64)>>,
    total: &mut Outcome,
    corrupt: &mut u64,
) {
    for h in handles {
        let (o, bad) = h
            .join()
            .unwrap_or_else(|_| panic!("{name} thread panicked"));
        total.add(&o);
        *corrupt += bad;
    }
}

/// Runs `worker(t)` for `t` in `0..threads`, each on its own scoped thread, and returns the
/// summed counts and corruption tally. Panics (naming the workload) if a worker panicked.
pub fn run_workers(
    name: &str,
    threads: usize,
    worker: impl Fn(usize) -> (Outcome, u64) + Sync,
) -> (Outcome, u64) {
    let mut total = Outcome::default();
    let mut corrupt = 0;
    std::thread::scope(|s| {
        let worker = &worker;
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let _tenant = crate::tenancy::worker();
                    worker(t)
                })
            })
            .collect();
        join_workers(name, hs, &mut total, &mut corrupt);
    });
    (total, corrupt)
}

/// Folds the summed counts and corruption tally into a verdict.
pub fn verdict(o: Outcome, corrupt: u64) -> WorkResult {
    if corrupt != 0 {
        return Err(format!("{corrupt} objects had a damaged stamp"));
    }
    if o.allocs != o.frees {
        return Err(format!("allocs {} != frees {}", o.allocs, o.frees));
    }
    Ok(o)
}

/// Parsed `[THREADS] [KNOB]`.
pub struct Args {
    /// Thread count (workers; some workloads add partner threads, see their help).
    pub threads: usize,
    /// Workload-specific size/iteration count.
    pub knob: usize,
}

/// Parse the command line; prints help and exits on `-h`/`--help` or a bad number.
pub fn parse(name: &str, help: &str, default_threads: usize, default_knob: usize) -> Args {
    let pct: usize = std::env::var("BENCH_SCALE_PCT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let scaled = (default_knob * pct / 100).max(1);
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        eprintln!(
            "usage: {name} [THREADS] [KNOB]\n  {help}\n  defaults: THREADS={default_threads} KNOB={default_knob} \
             (x BENCH_SCALE_PCT/100 = {scaled})"
        );
    };
    if argv.iter().any(|a| a == "-h" || a == "--help") || argv.len() > 2 {
        usage();
        std::process::exit(if argv.len() > 2 { 2 } else { 0 });
    }
    let num = |i: usize, d: usize| -> usize {
        match argv.get(i) {
            None => d,
            Some(s) => match s.parse::<usize>() {
                Ok(v) if v > 0 => v,
                _ => {
                    usage();
                    std::process::exit(2)
                }
            },
        }
    };
    Args {
        threads: num(0, default_threads),
        knob: num(1, scaled),
    }
}

/// Run `f`, print the RESULT line and exit with the verdict.
pub fn main_with(name: &str, args: &Args, f: impl FnOnce() -> WorkResult) -> ! {
    let t = Instant::now();
    let r = f();
    let secs = t.elapsed().as_secs_f64();
    match r {
        Ok(o) => {
            println!(
                "RESULT workload={name} allocator={} threads={} knob={} ops={} elapsed_s={secs:.4} verified=ok",
                crate::ALLOCATOR,
                args.threads,
                args.knob,
                o.allocs
            );
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("FAILED workload={name} allocator={}: {e}", crate::ALLOCATOR);
            std::process::exit(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_rejects_corruption_and_leaks() {
        let o = Outcome {
            allocs: 3,
            frees: 3,
        };
        assert_eq!(verdict(o.clone(), 0), Ok(o.clone()));
        assert!(verdict(o, 1).is_err());
        assert!(verdict(
            Outcome {
                allocs: 3,
                frees: 2
            },
            0
        )
        .is_err());
    }
}
