//! `systemone calibrate prior`: the position prior ([`crate::calibration::prior`]) fitted
//! offline from a ledger's questions read in two or more orders (requests that asked
//! `permutations`, and the prior's own samples), the way the service learns it while
//! serving: each question scored by the prior that has not seen it, then added. It prints
//! per shape what a single read would get (or that the fit declines), and with `--out DIR`
//! seeds `DIR/prior.redb`, which `serve --state-dir DIR` starts from. With `--tenant NAME`
//! it fits and seeds that caller's prior alone (a service with keys or tokens keeps one per
//! tenant); without it, the open service's one prior.
//!
//! `--raw-out` rows cannot feed it: a row of a `permutations` ≥ 2 run holds the
//! question's average, not its orders; the ledger keeps each order's reads.

use std::path::Path;
use std::time::Duration;

use crate::calibration::prior::shape::tenant_id;
use crate::calibration::prior::{PriorBook, PriorSettings, PriorShape, ShapeReport};
use crate::config::LedgerTarget;
use crate::ledger::reads::{ordered, QuestionReads};
use crate::models::prior_sync::{PriorStore, FILE_NAME};

/// How long writing the seed may take.
const SEED_TIMEOUT: Duration = Duration::from_secs(60);

/// What `calibrate prior` reads: `--from-ledger`, `--model`, `--since`, `--out`,
/// `--tenant`.
pub(super) struct PriorFit<'a> {
    pub ledger: Option<&'a LedgerTarget>,
    pub model: &'a str,
    pub since: Option<&'a str>,
    pub seed: Option<&'a Path>,
    pub tenant: Option<&'a str>,
}

/// Fits the prior of `--model` from `--from-ledger`, seeds `--out` when given, and
/// returns the summary.
pub(super) fn run(fit: PriorFit<'_>) -> Result<String, String> {
    let target = fit.ledger.ok_or(
        "--prior reads the ledger (--from-ledger): `--raw-out` rows hold a question's \
         average over its orders, not each order's reads",
    )?;
    let seed = fit.seed;
    if let Some(dir) = seed {
        refuse_a_used_state_dir(dir)?;
    }
    let filter = crate::ledger::query::Filter {
        key: fit.tenant.map(str::to_owned),
        ..super::ledger::filter(Some(fit.model), fit.since)?
    };
    let runtime = super::runtime()?;
    let questions = runtime.block_on(async {
        let store = super::ledger::open(target).await?;
        ordered(&store, &filter)
            .await
            .map_err(|e| format!("--from-ledger {target:?}: {e}"))
    })?;
    let (book, skipped) = learn(&questions, &tenant_id(fit.tenant));
    let mut out = summary(fit.model, questions.len() - skipped, &book.report());
    if let Some(name) = fit.tenant {
        out.insert_str(
            0,
            &format!("tenant {name:?} (its records only, seeded as its own)\n"),
        );
    }
    if skipped > 0 {
        out.push_str(&format!(
            "{skipped} question(s) left out: their reads do not make a shape (type, 2 to 255 options of equal count, a layout)\n"
        ));
    }
    if let Some(dir) = seed.filter(|_| !book.report().is_empty()) {
        let pending = book.take_pending();
        runtime.block_on(async {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            PriorStore::embedded(dir)
                .exchange(fit.model, &pending, SEED_TIMEOUT)
                .await
                .map_err(|e| format!("{}: {e}", dir.join(FILE_NAME).display()))
        })?;
        out.push_str(&format!(
            "seeded {}: `systemone serve --state-dir {} --prior-correction true` starts from it\n",
            dir.join(FILE_NAME).display(),
            dir.display()
        ));
    }
    Ok(out)
}

/// A state directory that already holds priors is refused: adding a fit of the ledger to
/// what the service learned from the same questions would count them twice.
fn refuse_a_used_state_dir(dir: &Path) -> Result<(), String> {
    let file = dir.join(FILE_NAME);
    if file.exists() {
        return Err(format!(
            "--out {}: {} exists; seed a new state directory (the service's own priors \
             already hold what it learned from these questions)",
            dir.display(),
            file.display()
        ));
    }
    Ok(())
}

/// Replays the questions, oldest first, into a book under `tenant`'s shapes
/// ([`tenant_id`]); returns it and how many questions made no shape.
fn learn(questions: &[QuestionReads], tenant: &str) -> (PriorBook, usize) {
    let book = PriorBook::new(PriorSettings {
        enabled: true,
        ..PriorSettings::default()
    });
    let mut skipped = 0;
    for q in questions {
        let orders: Vec<(usize, Vec<f64>)> = q
            .reads
            .orders
            .iter()
            .map(|o| (o.shift, o.logprobs.clone()))
            .collect();
        match shape_of(q, &orders) {
            Some(shape) => book.observe(
                PriorShape {
                    tenant: tenant.to_string(),
                    ..shape
                },
                &orders,
            ),
            None => skipped += 1,
        }
    }
    (book, skipped)
}

/// The question's shape, when its reads make one: two or more orders of one option count,
/// every shift within it and every value finite.
fn shape_of(q: &QuestionReads, orders: &[(usize, Vec<f64>)]) -> Option<PriorShape> {
    let n = orders.first()?.1.len();
    let sound = orders.len() >= 2
        && orders
            .iter()
            .all(|(shift, lp)| lp.len() == n && *shift < n && lp.iter().all(|x| x.is_finite()));
    if !sound {
        return None;
    }
    PriorShape::parse(&format!("{}/{n}/{}", q.kind, q.reads.layout))
}

/// One line per shape: samples, the held-out check and what single reads would get.
fn summary(model: &str, questions: usize, shapes: &[ShapeReport]) -> String {
    let mut out =
        format!("position prior of {model}: {questions} question(s) read in two or more orders\n");
    if shapes.is_empty() {
        out.push_str("nothing to fit: no recorded question was read in two or more orders (ask with `permutations` >= 2, or serve with --prior-correction true)\n");
        return out;
    }
    out.push_str("shape                 samples  scored  strength  weight  held-out gain/question  agree raw/corrected  prior by position\n");
    for s in shapes {
        let prior: Vec<String> = s.prior.iter().map(|p| format!("{p:+.3}")).collect();
        let verdict = s
            .declined
            .map_or(String::new(), |d| format!("  (declines: {})", d.as_str()));
        let a = s.agreement;
        let agree = format!("{}/{} {}/{}", a.raw, a.reads, a.corrected, a.reads);
        out.push_str(&format!(
            "{:<21} {:>7}  {:>6}  {:>8.1}  {:>6.3}  {:>22.4}  {agree:>19}  [{}]{verdict}\n",
            s.shape,
            s.samples,
            s.scored,
            s.strength,
            s.weight,
            s.gain,
            prior.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::record::{OrderReads, OrderedReads};

    fn question(kind: &str, layout: &str, orders: &[(usize, Vec<f64>)]) -> QuestionReads {
        QuestionReads {
            model: "m".into(),
            kind: kind.into(),
            reads: OrderedReads {
                layout: layout.into(),
                orders: orders
                    .iter()
                    .map(|(shift, logprobs)| OrderReads {
                        shift: *shift,
                        logprobs: logprobs.clone(),
                    })
                    .collect(),
            },
        }
    }

    /// Records a ledger could hold but no shape fits are counted out, not learned from.
    #[test]
    fn reads_that_make_no_shape_are_left_out() {
        let good = [(0, vec![-0.5, -1.5]), (1, vec![-0.7, -1.2])];
        let questions = [
            question("noul", "accuracy", &good),
            question("noul", "accuracy", &[(0, vec![-0.5, -1.5])]),
            question(
                "noul",
                "accuracy",
                &[(0, vec![-0.5, -1.5]), (1, vec![-1.0])],
            ),
            question(
                "noul",
                "accuracy",
                &[(0, vec![-0.5, -1.5]), (2, vec![-1.0, -2.0])],
            ),
            question(
                "noul",
                "accuracy",
                &[(0, vec![f64::NAN, -1.5]), (1, vec![-1.0, -2.0])],
            ),
            question("poll", "accuracy", &good),
            question("noul", "Accuracy", &good),
        ];
        let (book, skipped) = learn(&questions, "");
        assert_eq!(skipped, 6);
        let report = book.report();
        assert_eq!(report.len(), 1);
        assert_eq!(report[0].shape, "noul/2/accuracy");
        assert_eq!(report[0].samples, 1);
    }
}
