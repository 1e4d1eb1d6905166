//! `report [RAW_CSV] [OUT_DIR]`: turn the runner's measurements into `report.md` and
//! `chart.png` (built only with `--features report`; `run.sh` calls it).
//!
//! RAW_CSV (default `target/bench-report/raw.csv`), written by `run.sh`, one line per run:
//! `rep,workload,allocator,threads,knob,wall_s,max_rss_kb,status,ops,inner_s`.
//! Per workload and allocator the report shows the median wall time and the median of the
//! per-run peak RSS, and both as ratios to mimalloc (marked when time > 1.1x or RSS > 1.2x).
//! `OUT_DIR/meta.md`, if present, is copied to the top (machine, commit, notes).
//! `OUT_DIR/seeds/*.csv`, if present, fill the "seed experiments" section; format:
//! header `experiment,variant,metric,value,unit,note` (`note` optional), one row per
//! measurement; within an experiment every row is compared with the row of the same metric
//! whose variant is `baseline` (else the experiment's first variant for that metric).

use plotters::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const TIME_MARK: f64 = 1.1;
const RSS_MARK: f64 = 1.2;
const REFERENCE: &str = "mimalloc";
/// Column order; allocators not listed come after, in order of appearance.
const ORDER: [&str; 6] = [
    "mimalloc",
    "jemalloc",
    "system",
    "slabcg",
    "slabcg-tenant",
    "slabcg-request",
];
/// The unaccounted build that the accounted variants (`slabcg-*`) are compared with.
const UNACCOUNTED: &str = "slabcg";
/// The accounted variants' target: within this factor of the unaccounted build (issue 20).
const ACCOUNTED_MARK: f64 = 1.1;

struct Run {
    workload: String,
    allocator: String,
    threads: String,
    knob: String,
    wall_s: f64,
    rss_kb: f64,
    ok: bool,
    status: String,
    rep: String,
}

#[derive(Default)]
struct Cell {
    times: Vec<f64>,
    rss: Vec<f64>,
    failed: Vec<String>,
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

fn read_runs(path: &Path) -> Result<Vec<Run>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or("empty csv")?.split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h.trim() == name)
            .ok_or(format!("no column {name}"))
    };
    let (c_rep, c_w, c_a, c_t, c_k, c_wall, c_rss, c_st) = (
        col("rep")?,
        col("workload")?,
        col("allocator")?,
        col("threads")?,
        col("knob")?,
        col("wall_s")?,
        col("max_rss_kb")?,
        col("status")?,
    );
    let mut runs = Vec::new();
    for l in lines.filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        let get = |i: usize| f.get(i).copied().unwrap_or("");
        runs.push(Run {
            rep: get(c_rep).into(),
            workload: get(c_w).into(),
            allocator: get(c_a).into(),
            threads: get(c_t).into(),
            knob: get(c_k).into(),
            wall_s: get(c_wall).parse().unwrap_or(f64::NAN),
            rss_kb: get(c_rss).parse().unwrap_or(f64::NAN),
            ok: get(c_st) == "ok",
            status: get(c_st).into(),
        });
    }
    Ok(runs)
}

struct Table {
    workloads: Vec<(String, String, String)>, // name, threads, knob
    allocators: Vec<String>,
    cells: BTreeMap<(String, String), Cell>,
}

impl Table {
    fn new(runs: &[Run]) -> Table {
        let mut workloads: Vec<(String, String, String)> = Vec::new();
        let mut allocators: Vec<String> = Vec::new();
        let mut cells: BTreeMap<(String, String), Cell> = BTreeMap::new();
        for r in runs {
            if !workloads.iter().any(|w| w.0 == r.workload) {
                workloads.push((r.workload.clone(), r.threads.clone(), r.knob.clone()));
            }
            if !allocators.contains(&r.allocator) {
                allocators.push(r.allocator.clone());
            }
            let c = cells
                .entry((r.workload.clone(), r.allocator.clone()))
                .or_default();
            if r.ok && r.wall_s.is_finite() {
                c.times.push(r.wall_s);
                if r.rss_kb.is_finite() {
                    c.rss.push(r.rss_kb);
                }
            } else {
                c.failed.push(format!("rep {}: {}", r.rep, r.status));
            }
        }
        allocators.sort_by_key(|a| ORDER.iter().position(|o| o == a).unwrap_or(ORDER.len()));
        Table {
            workloads,
            allocators,
            cells,
        }
    }

    fn time(&self, w: &str, a: &str) -> Option<f64> {
        self.cells
            .get(&(w.into(), a.into()))
            .and_then(|c| median(&c.times))
    }

    /// (max - min) / median of the times, when above 20 %: the cell is noisy.
    fn noisy(&self, w: &str, a: &str) -> bool {
        let Some(c) = self.cells.get(&(w.into(), a.into())) else {
            return false;
        };
        let (lo, hi) = c
            .times
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
        median(&c.times).is_some_and(|m| c.times.len() > 1 && (hi - lo) / m > 0.2)
    }

    fn rss(&self, w: &str, a: &str) -> Option<f64> {
        self.cells
            .get(&(w.into(), a.into()))
            .and_then(|c| median(&c.rss))
    }

    fn ratio(&self, w: &str, a: &str, rss: bool) -> Option<f64> {
        let f = |x: &str| if rss { self.rss(w, x) } else { self.time(w, x) };
        Some(f(a)? / f(REFERENCE)?)
    }

    /// Time of `a` over the unaccounted slabcg's.
    fn accounted_ratio(&self, w: &str, a: &str) -> Option<f64> {
        Some(self.time(w, a)? / self.time(w, UNACCOUNTED)?)
    }

    fn geomean(&self, a: &str, rss: bool) -> Option<f64> {
        let v: Vec<f64> = self
            .workloads
            .iter()
            .filter_map(|w| self.ratio(&w.0, a, rss))
            .collect();
        Self::geo(&v)
    }

    fn accounted_geomean(&self, a: &str) -> Option<f64> {
        let v: Vec<f64> = self
            .workloads
            .iter()
            .filter_map(|w| self.accounted_ratio(&w.0, a))
            .collect();
        Self::geo(&v)
    }

    fn geo(v: &[f64]) -> Option<f64> {
        (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
    }
}

/// The accounted variants' time against the unaccounted build, when the run has both.
fn accounting_section(t: &Table) -> String {
    let variants: Vec<&String> = t
        .allocators
        .iter()
        .filter(|a| a.starts_with("slabcg-"))
        .collect();
    let mut s = String::new();
    if variants.is_empty() || !t.allocators.iter().any(|a| a == UNACCOUNTED) {
        return s;
    }
    let _ = writeln!(
        s,
        "## Accounting cost\n\nTime of the accounted builds over unaccounted {UNACCOUNTED}'s \
         (`slabcg-tenant`: every worker thread in a tenant of its own; `slabcg-request`: also a \
         child tenant per request or round, `bench-suite/src/tenancy.rs`); **bold** = above \
         {ACCOUNTED_MARK}x.\n"
    );
    let mut head = "| workload |".to_string();
    let mut sep = "|---|".to_string();
    for a in &variants {
        let _ = write!(head, " {a} / {UNACCOUNTED} |");
        sep.push_str("---:|");
    }
    let _ = writeln!(s, "{head}\n{sep}");
    for (w, _, _) in &t.workloads {
        let _ = write!(s, "| {w} |");
        for a in &variants {
            let _ = write!(
                s,
                " {} |",
                fmt_ratio(t.accounted_ratio(w, a), ACCOUNTED_MARK)
            );
        }
        let _ = writeln!(s);
    }
    let _ = write!(s, "| *geometric mean* |");
    for a in &variants {
        let _ = write!(
            s,
            " {} |",
            fmt_ratio(t.accounted_geomean(a), ACCOUNTED_MARK)
        );
    }
    let _ = writeln!(s, "\n");
    s
}

fn fmt_ratio(r: Option<f64>, mark: f64) -> String {
    match r {
        Some(r) if r > mark => format!("**{r:.2}x**"),
        Some(r) => format!("{r:.2}x"),
        None => "-".into(),
    }
}

fn markdown(t: &Table, meta: Option<String>, seeds: &str, chart: Option<&str>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# slabcg bench-suite report\n");
    if let Some(m) = meta {
        let _ = writeln!(s, "{}\n", m.trim_end());
    }
    let reps = t
        .cells
        .values()
        .map(|c| c.times.len() + c.failed.len())
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        s,
        "Median of {reps} run(s) per cell. Time: wall-clock seconds of the whole process. RSS: peak resident \
         set (median over runs of each run's `ru_maxrss`), MiB. Ratios are against {REFERENCE} \
         (lower is better); **bold** = time above {TIME_MARK}x or RSS above {RSS_MARK}x; \
         `~` = the runs' times spread more than 20 % (max - min vs median): treat that ratio with care.\n"
    );
    for (title, rss) in [("Time", false), ("Peak RSS", true)] {
        let _ = writeln!(s, "## {title}\n");
        let mut head = "| workload | threads | knob |".to_string();
        let mut sep = "|---|---:|---:|".to_string();
        for a in &t.allocators {
            if a == REFERENCE {
                let _ = write!(head, " {a} |");
                sep.push_str("---:|");
            } else {
                let _ = write!(head, " {a} | {a} / {REFERENCE} |");
                sep.push_str("---:|---:|");
            }
        }
        let _ = writeln!(s, "{head}\n{sep}");
        for (w, th, k) in &t.workloads {
            let _ = write!(s, "| {w} | {th} | {k} |");
            for a in &t.allocators {
                let failed = t
                    .cells
                    .get(&(w.clone(), a.clone()))
                    .is_some_and(|c| !c.failed.is_empty());
                let v = if rss {
                    t.rss(w, a).map(|x| x / 1024.0)
                } else {
                    t.time(w, a)
                };
                let mut cell = match v {
                    Some(v) if rss => format!("{v:.1}"),
                    Some(v) => format!("{v:.3}"),
                    None => "-".into(),
                };
                if !rss && t.noisy(w, a) {
                    cell.push_str(" ~");
                }
                if failed {
                    cell.push_str(" FAIL");
                }
                if a == REFERENCE {
                    let _ = write!(s, " {cell} |");
                } else {
                    let mark = if rss { RSS_MARK } else { TIME_MARK };
                    let _ = write!(s, " {cell} | {} |", fmt_ratio(t.ratio(w, a, rss), mark));
                }
            }
            let _ = writeln!(s);
        }
        let _ = write!(s, "| *geometric mean* | | |");
        for a in &t.allocators {
            if a == REFERENCE {
                let _ = write!(s, " |");
            } else {
                let mark = if rss { RSS_MARK } else { TIME_MARK };
                let _ = write!(s, " | {} |", fmt_ratio(t.geomean(a, rss), mark));
            }
        }
        let _ = writeln!(s, "\n");
    }
    if let Some(c) = chart {
        let _ = writeln!(s, "![time ratio vs {REFERENCE}]({c})\n");
    }
    s.push_str(&accounting_section(t));
    let failures: Vec<String> = t
        .cells
        .iter()
        .flat_map(|((w, a), c)| c.failed.iter().map(move |f| format!("- {w} / {a}: {f}")))
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(s, "## Failures\n\n{}\n", failures.join("\n"));
    }
    s.push_str(seeds);
    s
}

/// The "seed experiments" section from `dir/*.csv`.
fn seeds_section(dir: &Path) -> String {
    let mut s = String::from("## Seed experiments\n\n");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "csv"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    // experiment -> rows (variant, metric, value, unit, note)
    let mut exps: Vec<(String, Vec<[String; 5]>)> = Vec::new();
    let mut problems = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let mut lines = text.lines();
        let Some(h) = lines.next() else { continue };
        let h: Vec<&str> = h.split(',').map(str::trim).collect();
        let idx = |n: &str| h.iter().position(|x| *x == n);
        let (Some(e), Some(v), Some(m), Some(val)) = (
            idx("experiment"),
            idx("variant"),
            idx("metric"),
            idx("value"),
        ) else {
            problems.push(format!(
                "- `{}`: header must be `experiment,variant,metric,value,unit,note`",
                f.display()
            ));
            continue;
        };
        let (u, n) = (idx("unit"), idx("note"));
        for l in lines.filter(|l| !l.trim().is_empty()) {
            let c: Vec<&str> = l.splitn(h.len(), ',').map(str::trim).collect();
            let g = |i: Option<usize>| i.and_then(|i| c.get(i)).copied().unwrap_or("").to_string();
            let exp = g(Some(e));
            let row = [g(Some(v)), g(Some(m)), g(Some(val)), g(u), g(n)];
            match exps.iter_mut().find(|x| x.0 == exp) {
                Some(x) => x.1.push(row),
                None => exps.push((exp, vec![row])),
            }
        }
    }
    if exps.is_empty() {
        s.push_str(
            "No seed experiment results yet. Benches that compare variants of a mechanism from the seed \
             patches (accounting on/off, bulk alloc/free, Sock batching in the stock, owner-metadata bytes, \
             cache packing / slab order) write `target/bench-report/seeds/<name>.csv` with the header \
             `experiment,variant,metric,value,unit,note`; each row is then compared with the `baseline` \
             variant of the same experiment and metric. Re-run `bench-suite/run.sh --report-only` to refresh.\n",
        );
    }
    for (exp, rows) in &exps {
        let _ = writeln!(s, "### {exp}\n\n| variant | metric | value | vs baseline | note |\n|---|---|---:|---:|---|");
        for r in rows {
            let base = rows
                .iter()
                .find(|b| b[1] == r[1] && b[0] == "baseline")
                .or_else(|| rows.iter().find(|b| b[1] == r[1]))
                .and_then(|b| b[2].parse::<f64>().ok());
            let ratio = match (r[2].parse::<f64>().ok(), base) {
                (Some(x), Some(b)) if b != 0.0 => format!("{:.3}x", x / b),
                _ => "-".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} {} | {ratio} | {} |",
                r[0], r[1], r[2], r[3], r[4]
            );
        }
        s.push('\n');
    }
    if !problems.is_empty() {
        let _ = writeln!(s, "Unreadable seed files:\n{}\n", problems.join("\n"));
    }
    s
}

fn load_font() -> Result<(), String> {
    let mut candidates: Vec<String> = std::env::var("BENCH_FONT").into_iter().collect();
    candidates.extend(
        [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
            "/usr/share/fonts/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
            "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
        ]
        .map(String::from),
    );
    for c in &candidates {
        if let Ok(bytes) = std::fs::read(c) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            for style in [FontStyle::Normal, FontStyle::Bold] {
                plotters::style::register_font("sans-serif", style, bytes)
                    .map_err(|_| format!("{c}: not a font"))?;
            }
            return Ok(());
        }
    }
    Err("no TrueType font found (set BENCH_FONT=/path/to/font.ttf; apt-get install fonts-dejavu-core)".into())
}

fn color(a: &str, i: usize) -> RGBColor {
    match a {
        "slabcg" => RGBColor(214, 39, 40),
        "slabcg-tenant" => RGBColor(255, 127, 14),
        "slabcg-request" => RGBColor(227, 119, 194),
        "jemalloc" => RGBColor(31, 119, 180),
        "system" => RGBColor(127, 127, 127),
        "mimalloc" => RGBColor(44, 160, 44),
        _ => [
            RGBColor(148, 103, 189),
            RGBColor(140, 86, 75),
            RGBColor(23, 190, 207),
        ][i % 3],
    }
}

fn chart(t: &Table, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    load_font()?;
    let peers: Vec<&String> = t.allocators.iter().filter(|a| *a != REFERENCE).collect();
    let mut groups: Vec<String> = t.workloads.iter().map(|w| w.0.clone()).collect();
    groups.push("geomean".into());
    let val = |g: &str, a: &str| {
        if g == "geomean" {
            t.geomean(a, false)
        } else {
            t.ratio(g, a, false)
        }
    };
    // log scale, bars grow from 1.0 (= the reference) up (slower) or down (faster)
    let all: Vec<f64> = groups
        .iter()
        .flat_map(|g| peers.iter().filter_map(move |a| val(g, a)))
        .collect();
    let ymax = all.iter().copied().fold(2.0f64, f64::max) * 1.3;
    let ymin = all.iter().copied().fold(0.5f64, f64::min) / 1.3;
    let n = groups.len();
    let root = BitMapBackend::new(path, (1400, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut ch = ChartBuilder::on(&root)
        .caption(
            format!("wall time relative to {REFERENCE} (below 1.0 = faster than {REFERENCE})"),
            ("sans-serif", 24),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        // 0..n-1 gives n segments (plotters' integer range includes its end)
        .build_cartesian_2d((0..n - 1).into_segmented(), (ymin..ymax).log_scale())?;
    ch.configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => groups.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_labels(n)
        .y_desc(format!("time / {REFERENCE} time (log scale)"))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .label_style(("sans-serif", 15))
        .draw()?;
    // bars: each group's segment spans Exact(gi)..Exact(gi + 1) on the segmented axis; the
    // bars of a group share its middle 80 %, in backend pixels
    let area = ch.plotting_area();
    let (xr, _) = area.get_pixel_range();
    for (pi, a) in peers.iter().enumerate() {
        let c = color(a, pi);
        for (gi, g) in groups.iter().enumerate() {
            let Some(r) = val(g, a) else { continue };
            let x0 = area.map_coordinate(&(SegmentValue::Exact(gi), 1.0)).0 as f64;
            let x1 = area.map_coordinate(&(SegmentValue::Exact(gi + 1), 1.0)).0 as f64;
            let bar_w = (x1 - x0) * 0.8 / peers.len() as f64;
            let left = x0 + (x1 - x0) * 0.1 + pi as f64 * bar_w;
            let end = area.map_coordinate(&(SegmentValue::Exact(gi), r)).1;
            let one = area.map_coordinate(&(SegmentValue::Exact(gi), 1.0)).1;
            let rect = [(left as i32, end), ((left + bar_w - 2.0) as i32, one)];
            root.draw(&Rectangle::new(rect, c.filled()))?;
            let label = format!("{r:.2}");
            let y = if r >= 1.0 { end - 14 } else { end + 2 };
            root.draw(&Text::new(
                label,
                (left as i32, y),
                ("sans-serif", 11).into_font().color(&BLACK),
            ))?;
        }
    }
    // the reference line
    let y1 = area.map_coordinate(&(SegmentValue::Exact(0), 1.0)).1;
    root.draw(&PathElement::new(
        vec![(xr.start, y1), (xr.end, y1)],
        BLACK.stroke_width(2),
    ))?;
    // legend
    for (pi, a) in peers.iter().enumerate() {
        let x = xr.start + 20 + pi as i32 * 140;
        let y = area.map_coordinate(&(SegmentValue::Exact(0), ymax)).1 + 10;
        root.draw(&Rectangle::new(
            [(x, y), (x + 18, y + 14)],
            color(a, pi).filled(),
        ))?;
        root.draw(&Text::new(
            a.to_string(),
            (x + 24, y),
            ("sans-serif", 15).into_font().color(&BLACK),
        ))?;
    }
    root.present()?;
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        eprintln!("usage: report [RAW_CSV] [OUT_DIR]   (defaults: target/bench-report/raw.csv target/bench-report)");
        return;
    }
    let raw = PathBuf::from(
        args.first()
            .map_or("target/bench-report/raw.csv", String::as_str),
    );
    let out = PathBuf::from(args.get(1).map_or("target/bench-report", String::as_str));
    let runs = match read_runs(&raw) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("report: {e}");
            std::process::exit(1)
        }
    };
    let t = Table::new(&runs);
    let png = out.join("chart.png");
    let chart_ok = match chart(&t, &png) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("report: chart not drawn: {e}");
            false
        }
    };
    let meta = std::fs::read_to_string(out.join("meta.md")).ok();
    let md = markdown(
        &t,
        meta,
        &seeds_section(&out.join("seeds")),
        chart_ok.then_some("chart.png"),
    );
    let md_path = out.join("report.md");
    if let Err(e) = std::fs::write(&md_path, &md) {
        eprintln!("report: {}: {e}", md_path.display());
        std::process::exit(1)
    }
    print!("{md}");
    eprintln!(
        "report: wrote {}{}",
        md_path.display(),
        if chart_ok {
            format!(" and {}", png.display())
        } else {
            String::new()
        }
    );
    if !chart_ok {
        std::process::exit(1)
    }
}
