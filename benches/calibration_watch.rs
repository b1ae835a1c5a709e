//! The calibration watch's alerts on synthetic traffic: how many answers after a shift of a
//! backend's label bias the shipped alert rules flag it, and how often they fire on
//! stationary traffic. Prints markdown tables on stdout; progress on stderr. Nothing is
//! asserted.
//!
//! **Traffic, in process.** A synthetic backend answers one question shape (`noul`, two
//! options, like the spam question; `BENCH_WATCH_OPTIONS` for more): per answer, logits
//! `z_j = 1.5·N(0,1)` (plus 0.4 on option 0), the true posterior `p = softmax(z)`, the true
//! label drawn from `p` (so stationary traffic is perfectly calibrated), and the served
//! probabilities `softmax(z + b·e_last)`: `b` is the backend's label bias, 0 before the shift
//! and `BENCH_WATCH_BIAS` (default 1.0 nat toward the last option) after. `option_mass` is
//! `0.9 + 0.05·N(0,1)`, never shifted. Each answer becomes a ledger record
//! (`ledger::record::Decision`) fed to the watch by the ledger's own feed
//! (`ledger::watch::record`, what the writer calls on each commit), and a share
//! `BENCH_WATCH_OUTCOMES` (default 0.5) gets its true label as an outcome through
//! `ledger::watch::outcome` (what the outcome route calls). Answers arrive as a Poisson
//! stream at a rate per hour (`BENCH_WATCH_RATES`, default `60,600`), from a Sunday noon:
//! the reference window is then the default one, the first full week (Monday to Monday).
//!
//! **Flagged, as operators get it.** Prometheus scrapes every minute: the bench reads the
//! gauges the way `/metrics` gets them (`ledger::watch::gauges` at the scrape's time) and
//! evaluates every rule of `docs/alerts/calibration-watch.yaml` (parsed from the file, so
//! the bench measures the shipped thresholds: a threshold on a window's gauge, an answer
//! or outcome count guard, `offset 1w`, and `for:`) as Prometheus does: a rule whose
//! expression holds is pending from that evaluation and fires once it has held at every
//! evaluation for its `for:`. An alert is **flagged** at its first firing evaluation.
//!
//! **Runs.** `BENCH_WATCH_SHIFTS` (default 20) shift runs per rate: the shift falls at a
//! uniformly random time in the week after the reference; answers-to-flag counts the
//! answers from the shift to each alert's first firing (up to `BENCH_WATCH_CAP`, default
//! 5,000 answers). `BENCH_WATCH_STATIONARY` (default 10) stationary runs of 10,000 answers
//! after the reference week (every rule is live then) count each alert's firings (a firing
//! episode counts once).
//!
//! `BENCH_WATCH_RULES=FILE` evaluates another rules file of the same forms instead (to tune
//! a threshold before shipping it).
//!
//! `cargo bench --bench calibration_watch`

use std::collections::HashMap;
use std::time::Instant;

use systemone::calibration::fit::{softmax, SplitMix64};
use systemone::calibration::watch::{Settings, Watch};
use systemone::ledger::record::{Decision, QuestionRecord, Tokens};
use systemone::ledger::watch as feed;
use systemone::metrics::CALIBRATION_FIGURES;

/// The shipped rules.
const RULES: &str = include_str!("../docs/alerts/calibration-watch.yaml");
/// 2026-11-01 12:00 UTC, a Sunday noon: the reference is the week from the next Monday.
const START_MS: i64 = 1_793_577_600_000 - 12 * HOUR_MS;
const HOUR_MS: i64 = 3_600_000;
const WEEK_MS: i64 = 7 * 24 * HOUR_MS;
/// The reference window's end: every rule is live from then.
const REFERENCE_END_MS: i64 = START_MS + 12 * HOUR_MS + WEEK_MS;
/// Prometheus's evaluation interval.
const SCRAPE_MS: i64 = 60_000;
/// Answers per stationary run.
const STATIONARY_ANSWERS: u64 = 10_000;

/// One rule as parsed from the YAML.
#[derive(Debug, Clone)]
struct Rule {
    alert: String,
    expr: Expr,
    for_ms: i64,
}

/// `gauge{window} OP threshold and on(…) guard{window} >= min`.
#[derive(Debug, Clone)]
struct Threshold {
    gauge: String,
    window: String,
    above: bool,
    threshold: f64,
    guard: Option<(String, f64)>,
}

#[derive(Debug, Clone)]
enum Expr {
    Threshold(Threshold),
    /// `gauge{window} < factor * (gauge{window} offset DURATION)`, with a guard as above.
    Offset {
        gauge: String,
        window: String,
        factor: f64,
        offset_ms: i64,
        guard: Option<(String, f64)>,
    },
}

fn duration_ms(text: &str) -> i64 {
    let (n, unit) = text.split_at(text.len() - 1);
    let n: i64 = n.parse().unwrap_or_else(|_| panic!("a duration: {text}"));
    n * match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => HOUR_MS,
        "d" => 24 * HOUR_MS,
        "w" => WEEK_MS,
        _ => panic!("a duration unit: {text}"),
    }
}

/// `name{window="w"}` → (name, w).
fn selector(text: &str) -> (String, String) {
    let text = text.trim().trim_start_matches('(');
    let (name, rest) = text
        .split_once('{')
        .unwrap_or_else(|| panic!("a selector: {text}"));
    let window = rest
        .split_once("window=\"")
        .and_then(|(_, w)| w.split_once('"'))
        .map(|(w, _)| w)
        .unwrap_or_else(|| panic!("a window in {text}"));
    (name.to_owned(), window.to_owned())
}

fn parse_expr(expr: &str) -> Expr {
    let words: Vec<&str> = expr.split_whitespace().collect();
    let (gauge, window) = selector(words[0]);
    // `… and on(…) guard{window} >= min`: the guard on the same window.
    let guard = words.iter().position(|w| *w == ">=").map(|at| {
        let (name, guard_window) = selector(words[at - 1]);
        assert_eq!(guard_window, window, "{expr}");
        (name, words[at + 1].parse().expect("a count"))
    });
    if let Some(at) = words.iter().position(|w| *w == "offset") {
        // gauge{…} < F * (gauge{…} offset 1w)
        assert_eq!(words[1], "<", "{expr}");
        return Expr::Offset {
            gauge,
            window,
            factor: words[2].parse().expect("a factor"),
            offset_ms: duration_ms(words[at + 1].trim_end_matches(')')),
            guard,
        };
    }
    let above = match words[1] {
        ">" => true,
        "<" => false,
        other => panic!("an operator: {other} in {expr}"),
    };
    let threshold = words[2].parse().expect("a threshold");
    Expr::Threshold(Threshold {
        gauge,
        window,
        above,
        threshold,
        guard,
    })
}

/// The rules of the shipped YAML (alert, expr block, for), or of the file
/// `BENCH_WATCH_RULES` names (a candidate being tuned).
fn rules() -> Vec<Rule> {
    let text = match std::env::var("BENCH_WATCH_RULES") {
        Ok(path) => std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")),
        Err(_) => RULES.to_owned(),
    };
    let mut rules = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(alert) = line.trim().strip_prefix("- alert: ") else {
            continue;
        };
        let (mut expr, mut for_ms) = (String::new(), 0);
        while let Some(next) = lines.peek() {
            let t = next.trim();
            if t.starts_with("- alert: ") {
                break;
            }
            let next = lines.next().unwrap_or_default().trim();
            if next == "expr: |" {
                while lines.peek().is_some_and(|l| {
                    let l = l.trim();
                    !l.is_empty() && !l.starts_with('#') && !l.contains(": ") && l != "labels:"
                }) {
                    expr.push(' ');
                    expr.push_str(lines.next().unwrap_or_default().trim());
                }
            } else if let Some(d) = next.strip_prefix("for: ") {
                for_ms = duration_ms(d);
            }
        }
        rules.push(Rule {
            alert: alert.to_owned(),
            expr: parse_expr(&expr),
            for_ms,
        });
    }
    assert!(
        !rules.is_empty(),
        "rules in docs/alerts/calibration-watch.yaml"
    );
    rules
}

/// One scrape's series of the single shape: (gauge name, window) → value.
type Scrape = HashMap<(String, String), f64>;

fn scrape(watch: &Watch, now_ms: i64) -> Scrape {
    let mut series = Scrape::new();
    for (labels, values) in feed::gauges(watch, now_ms) {
        for ((name, _), value) in CALIBRATION_FIGURES.iter().zip(values) {
            if let Some(v) = value.filter(|v| v.is_finite()) {
                series.insert((format!("systemone_{name}"), labels[5].clone()), v);
            }
        }
    }
    series
}

/// Whether `expr` holds at this scrape (`past`: earlier scrapes by time, for `offset`).
fn holds(expr: &Expr, now: &Scrape, past: &HashMap<i64, Scrape>, now_ms: i64) -> bool {
    let get = |s: &Scrape, g: &str, w: &str| s.get(&(g.to_owned(), w.to_owned())).copied();
    let guarded = |guard: &Option<(String, f64)>, w: &str| {
        guard
            .as_ref()
            .is_none_or(|(g, min)| get(now, g, w).is_some_and(|c| c >= *min))
    };
    match expr {
        Expr::Threshold(t) => {
            let Some(v) = get(now, &t.gauge, &t.window) else {
                return false;
            };
            let past_threshold = if t.above {
                v > t.threshold
            } else {
                v < t.threshold
            };
            past_threshold && guarded(&t.guard, &t.window)
        }
        Expr::Offset {
            gauge,
            window,
            factor,
            offset_ms,
            guard,
        } => {
            let before = past
                .get(&(now_ms - offset_ms))
                .and_then(|s| get(s, gauge, window));
            let fell =
                matches!((get(now, gauge, window), before), (Some(v), Some(b)) if v < factor * b);
            fell && guarded(guard, window)
        }
    }
}

/// One alert's evaluation state.
#[derive(Debug, Default, Clone)]
struct Alerting {
    pending_since: Option<i64>,
    firing: bool,
}

impl Alerting {
    /// Evaluates; `true` when the alert starts firing now.
    fn step(&mut self, holds: bool, now_ms: i64, for_ms: i64) -> bool {
        if !holds {
            *self = Alerting::default();
            return false;
        }
        let since = *self.pending_since.get_or_insert(now_ms);
        if !self.firing && now_ms - since >= for_ms {
            self.firing = true;
            return true;
        }
        false
    }
}

/// The synthetic backend and its label bias.
struct Backend {
    rng: SplitMix64,
    options: usize,
    bias: f64,
}

impl Backend {
    /// Served probabilities, the true label and `option_mass`.
    fn answer(&mut self) -> (Vec<f64>, usize, f64) {
        let z: Vec<f64> = (0..self.options)
            .map(|j| 1.5 * self.rng.normal() + if j == 0 { 0.4 } else { 0.0 })
            .collect();
        let truth = self.rng.categorical(&softmax(&z));
        let mut served = z;
        if let Some(last) = served.last_mut() {
            *last += self.bias;
        }
        let mass = (0.9 + 0.05 * self.rng.normal()).clamp(0.0, 1.0);
        (softmax(&served), truth, mass)
    }
}

fn decision(at_ms: i64, probabilities: Vec<f64>, option_mass: f64) -> Decision {
    let answer = systemone::calibration::argmax(&probabilities);
    let n = probabilities.len() as f64;
    let entropy: f64 = probabilities
        .iter()
        .filter(|p| **p > 0.0)
        .map(|p| -p * p.ln())
        .sum();
    Decision {
        request_id: String::new(),
        at_ms,
        key: "bench".into(),
        route: "/v1/systemone".into(),
        status: 200,
        code: None,
        model: Some("synthetic".into()),
        latency_ms: 0.0,
        usage: Tokens::default(),
        body_hash: None,
        images: Vec::new(),
        questions: vec![QuestionRecord {
            name: "q".into(),
            kind: if probabilities.len() == 2 {
                "noul"
            } else {
                "choice"
            }
            .into(),
            options: probabilities.len(),
            labels: Vec::new(),
            answer,
            confidence: 1.0 - entropy / n.ln(),
            probabilities,
            temperature: 1.0,
            option_mass: Some(option_mass),
            model: String::new(),
            profile: None,
            prior_correction: None,
            layout: Some("accuracy".into()),
            reads: None,
        }],
        hash_key_id: String::new(),
        inputs: None,
    }
}

/// What to run: a shift at `shift_ms` (answers counted from it, up to `cap`), or stationary
/// traffic (answers counted from the reference's end, `cap` of them).
struct Run {
    seed: u64,
    rate_per_hour: f64,
    shift_ms: Option<i64>,
    bias: f64,
    options: usize,
    outcome_share: f64,
    cap: u64,
}

/// Per alert: the answers counted when it started firing, each time it did after the
/// counting began.
fn run(r: &Run, rules: &[Rule]) -> Vec<Vec<u64>> {
    let watch = Watch::new(Settings::default());
    let mut backend = Backend {
        rng: SplitMix64::new(r.seed),
        options: r.options,
        bias: 0.0,
    };
    let counted_from = r.shift_ms.unwrap_or(REFERENCE_END_MS);
    let mut states = vec![Alerting::default(); rules.len()];
    let mut fired: Vec<Vec<u64>> = vec![Vec::new(); rules.len()];
    let mut past: HashMap<i64, Scrape> = HashMap::new();
    let keep_past = rules.iter().any(|r| matches!(r.expr, Expr::Offset { .. }));
    let gap_ms =
        |rng: &mut SplitMix64| -(1.0 - rng.next_f64()).ln() * HOUR_MS as f64 / r.rate_per_hour;
    let (mut at, mut next_scrape, mut counted) = (START_MS as f64, START_MS, 0u64);
    let mut changed = true;
    let mut last: Scrape = Scrape::new();
    loop {
        at += gap_ms(&mut backend.rng);
        while next_scrape <= at as i64 {
            // Gauges change only with an answer or a new hour (a window rolling over).
            if changed || next_scrape % HOUR_MS == 0 {
                last = scrape(&watch, next_scrape);
                changed = false;
            }
            for (k, rule) in rules.iter().enumerate() {
                let holds = holds(&rule.expr, &last, &past, next_scrape);
                if states[k].step(holds, next_scrape, rule.for_ms) && next_scrape >= counted_from {
                    fired[k].push(counted);
                }
            }
            if keep_past {
                past.insert(next_scrape, last.clone());
                past.remove(&(next_scrape - WEEK_MS - HOUR_MS));
            }
            next_scrape += SCRAPE_MS;
        }
        let at_ms = at as i64;
        if r.shift_ms.is_some_and(|s| at_ms >= s) {
            backend.bias = r.bias;
        }
        if at_ms >= counted_from {
            counted += 1;
            let all_fired = r.shift_ms.is_some() && fired.iter().all(|f| !f.is_empty());
            if counted > r.cap || all_fired {
                return fired;
            }
        }
        let (served, truth, mass) = backend.answer();
        let d = decision(at_ms, served, mass);
        feed::record(&watch, &d);
        if backend.rng.next_f64() < r.outcome_share {
            feed::outcome(&watch, &d, &d.questions[0], truth, None);
        }
        changed = true;
    }
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        })
        .unwrap_or(default)
}

/// Nearest-rank median; `None` (not flagged) sorts last.
fn median(mut v: Vec<Option<u64>>) -> Option<u64> {
    v.sort_by_key(|x| x.unwrap_or(u64::MAX));
    v.get(v.len().div_ceil(2).saturating_sub(1))
        .copied()
        .flatten()
}

fn show(x: Option<u64>, cap: u64) -> String {
    x.map_or(format!("> {cap}"), |n| n.to_string())
}

fn main() {
    let rules = rules();
    let rates: Vec<f64> = std::env::var("BENCH_WATCH_RATES")
        .unwrap_or_else(|_| "60,600".into())
        .split(',')
        .map(|r| r.trim().parse().expect("a rate per hour"))
        .collect();
    let (bias, options) = (
        env("BENCH_WATCH_BIAS", 1.0),
        env("BENCH_WATCH_OPTIONS", 2usize),
    );
    let outcome_share = env("BENCH_WATCH_OUTCOMES", 0.5);
    let (shifts, stationary) = (
        env("BENCH_WATCH_SHIFTS", 20u64),
        env("BENCH_WATCH_STATIONARY", 10u64),
    );
    let cap = env("BENCH_WATCH_CAP", 5_000u64);
    let started = Instant::now();
    let mut shift_table = String::from(
        "| answers/hour | alert | flagged | median answers to flag | worst |\n|---|---|---|---|---|\n",
    );
    let mut false_table = String::from(
        "| answers/hour | alert | firings in all runs | per 10,000 answers |\n|---|---|---|---|\n",
    );
    for rate in &rates {
        let mut to_flag: Vec<Vec<Option<u64>>> = vec![Vec::new(); rules.len() + 1];
        for s in 0..shifts {
            let mut rng = SplitMix64::new(1_000 + s);
            let shift_ms = REFERENCE_END_MS + (rng.next_f64() * WEEK_MS as f64) as i64;
            let run_ = Run {
                seed: s,
                rate_per_hour: *rate,
                shift_ms: Some(shift_ms),
                bias,
                options,
                outcome_share,
                cap,
            };
            let fired = run(&run_, &rules);
            let firsts: Vec<Option<u64>> = fired.iter().map(|f| f.first().copied()).collect();
            to_flag[rules.len()].push(firsts.iter().flatten().min().copied());
            for (k, first) in firsts.into_iter().enumerate() {
                to_flag[k].push(first);
            }
            eprintln!(
                "rate {rate}/h shift {s}: {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
        let names = rules.iter().map(|r| r.alert.as_str()).chain(["any"]);
        for (name, v) in names.zip(&to_flag) {
            let flagged = v.iter().flatten().count();
            let worst = if flagged == v.len() {
                v.iter().flatten().max().copied()
            } else {
                None
            };
            shift_table.push_str(&format!(
                "| {rate} | {name} | {flagged}/{} | {} | {} |\n",
                v.len(),
                show(median(v.clone()), cap),
                show(worst, cap)
            ));
        }
        let mut firings = vec![0usize; rules.len() + 1];
        for s in 0..stationary {
            let run_ = Run {
                seed: 10_000 + s,
                rate_per_hour: *rate,
                shift_ms: None,
                bias,
                options,
                outcome_share,
                cap: STATIONARY_ANSWERS,
            };
            let fired = run(&run_, &rules);
            for (k, f) in fired.iter().enumerate() {
                firings[k] += f.len();
            }
            firings[rules.len()] += fired.iter().map(Vec::len).sum::<usize>();
            eprintln!(
                "rate {rate}/h stationary {s}: {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
        let names = rules.iter().map(|r| r.alert.as_str()).chain(["any"]);
        for (name, n) in names.zip(&firings) {
            false_table.push_str(&format!(
                "| {rate} | {name} | {n} | {:.2} |\n",
                *n as f64 / stationary as f64
            ));
        }
    }
    println!("Shift: label bias {bias} nat, {options} options, outcomes on {outcome_share} of answers, {shifts} shifts per rate\n");
    println!("{shift_table}");
    println!(
        "Stationary: {stationary} runs of {STATIONARY_ANSWERS} answers after the reference week\n"
    );
    println!("{false_table}");
    eprintln!("{:.0} s in all", started.elapsed().as_secs_f64());
}
