//! The live check: is the token table still true of the tokenizer that serves right now?
//!
//! A wrong table gives plausible, wrong probabilities, so the service checks it against the
//! backend when the model starts and every `interval` after (`docs/token-tables.md`): one tokenize
//! call (the backend's `/tokenize`, a request per text) for `prefix`, `prefix + label` for
//! every single-token label and
//! `prefix + text` for every multi-token label (see [`check_texts`]), compared with the
//! table. The comparison is relative to the backend's own tokens for the prefix, so a BOS
//! the backend adds is neither required nor forbidden. A multi-token label must tokenize as
//! the prefix's tokens followed by exactly the label's ids.
//!
//! * Checks run only in the model's upkeep task ([`crate::models::upkeep`]); requests and
//!   `/readyz` read the last verdict and never wait, except that a request arriving before
//!   the very first check finished waits for it (bounded by `timeout`).
//! * A mismatch disables the model (503 `system_one_token_table_mismatch` with
//!   `Retry-After`) until a later check passes.
//! * An automatic table found wrong is rebuilt, and the mismatch stands from the moment the
//!   check finds it until the rebuilt table has passed its own check: answers read with
//!   label ids known to be wrong would be plausible and wrong, so a rebuild that fails or
//!   times out leaves the model disabled (retried with backoff), never serving the old table.
//! * A check that cannot conclude (429, timeout, malformed answer) keeps the previous verdict;
//!   [`Status::last_check_concluded`] records that the backend did not answer it (`/readyz`).
//!   While no check has ever concluded (a cold backend), the upkeep retries with backoff.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::{Backend, Due};
use crate::in_flight::InFlight;
use crate::models::tokens::live::LiveBuildError;
use crate::models::tokens::served::ServedTable;
use crate::models::tokens::TokenTable;

/// What the last concluded check said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No check has concluded yet.
    Unchecked,
    /// The table matches the serving tokenizer.
    Verified,
    /// The table does not match: the model is disabled.
    Mismatch,
    /// Checks are turned off for this model (interval 0).
    Disabled,
}

impl Verdict {
    /// The metric value: 0 unchecked, 1 verified, -1 mismatch.
    pub fn as_metric(self) -> i64 {
        match self {
            Verdict::Unchecked => 0,
            Verdict::Verified => 1,
            Verdict::Mismatch => -1,
            Verdict::Disabled => 2,
        }
    }

    /// A word for `/readyz`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Unchecked => "unchecked",
            Verdict::Verified => "verified",
            Verdict::Mismatch => "mismatch",
            Verdict::Disabled => "disabled",
        }
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckOutcome {
    /// The table matches.
    Match,
    /// The table does not match; the text says where (token ids only).
    Mismatch(String),
    /// The check could not conclude; the text says why.
    Inconclusive(String),
}

/// A snapshot for `/readyz` and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The current verdict.
    pub verdict: Verdict,
    /// Wall-clock time the last check finished (concluded or not).
    pub last_check: Option<SystemTime>,
    /// Whether the last finished check concluded (match or mismatch), i.e. the backend
    /// answered its last health probe; `None` before any check finished.
    pub last_check_concluded: Option<bool>,
    /// Whether a check is running now (`/readyz` says "checking" before the first verdict).
    pub checking: bool,
}

#[derive(Debug)]
struct State {
    verdict: Verdict,
    /// When the last check started (tokio time, so paused clocks drive it in tests).
    started: Option<Instant>,
    /// Whether a check is running now.
    running: bool,
    /// Wall-clock time of the last finished check.
    finished_at: Option<SystemTime>,
    /// Whether the last finished check concluded.
    concluded: Option<bool>,
    /// Where the last mismatch was found (token ids and label texts, never caller text);
    /// cleared by a match.
    reason: Option<String>,
}

/// The live token-table check of one model.
#[derive(Debug)]
pub struct Verifier {
    /// Verdict and schedule; held only for bookkeeping, never across a check.
    state: Mutex<State>,
    /// Bumped each time a check finishes, so first-time waiters wake.
    finished: watch::Sender<u64>,
    /// Time between checks.
    interval: Duration,
    /// Bound on one check.
    timeout: Duration,
}

impl Verifier {
    /// A verifier that has not checked yet; an `interval` of zero turns checks off.
    pub fn new(interval: Duration, timeout: Duration) -> Self {
        Verifier {
            state: Mutex::new(State {
                verdict: if interval.is_zero() {
                    Verdict::Disabled
                } else {
                    Verdict::Unchecked
                },
                started: None,
                running: false,
                finished_at: None,
                concluded: None,
                reason: None,
            }),
            finished: watch::channel(0).0,
            interval,
            timeout,
        }
    }

    /// The current verdict and when the last check ran.
    pub fn status(&self) -> Status {
        let state = self.lock();
        Status {
            verdict: state.verdict,
            last_check: state.finished_at,
            last_check_concluded: state.concluded,
            checking: state.running,
        }
    }

    /// Where the last check found the table wrong, while it stands.
    pub fn reason(&self) -> Option<String> {
        let state = self.lock();
        (state.verdict == Verdict::Mismatch)
            .then(|| state.reason.clone())
            .flatten()
    }

    /// One replica's check: `table` (the model's, built or fixed) against `backend`'s
    /// tokenizer, bounded by the timeout, never building or rebuilding anything (the
    /// model's own check does that). `None`, an automatic table not built yet: retried.
    pub async fn check_against(
        &self,
        backend: &dyn Backend,
        table: Option<&TokenTable>,
        in_flight: &InFlight,
    ) -> Due {
        if self.lock().verdict == Verdict::Disabled {
            return Due::Never;
        }
        let Some(table) = table else {
            return Due::Retry;
        };
        {
            let mut state = self.lock();
            state.running = true;
            state.started = Some(Instant::now());
        }
        let outcome = tokio::time::timeout(self.timeout, check_once(backend, table, in_flight))
            .await
            .unwrap_or_else(|_| CheckOutcome::Inconclusive("the check timed out".into()));
        self.record(outcome);
        match self.lock().verdict {
            Verdict::Unchecked => Due::Retry,
            _ => Due::In(self.interval),
        }
    }

    /// Seconds until the next check is due (for `Retry-After`), at least 1.
    pub fn seconds_to_next_check(&self) -> u64 {
        let state = self.lock();
        let due = state.started.map_or(Duration::ZERO, |s| {
            (s + self.interval).saturating_duration_since(Instant::now())
        });
        due.as_secs().max(1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The verdict a request goes by: the last one, except that before the first check
    /// finished this waits for it (bounded by the check timeout). Never starts a check.
    pub async fn settled(&self) -> Verdict {
        let mut finished = self.finished.subscribe();
        if self.first_pending() {
            let _ = tokio::time::timeout(self.timeout, finished.changed()).await;
        }
        self.lock().verdict
    }

    /// Whether the first check has not finished yet ([`Self::settled`] then waits for it).
    pub fn first_pending(&self) -> bool {
        let state = self.lock();
        state.verdict == Verdict::Unchecked && state.finished_at.is_none()
    }

    /// Waits until the first check (or an automatic table's first build) has finished,
    /// bounded by the check timeout; at once after that.
    pub async fn first_finished(&self) {
        let mut finished = self.finished.subscribe();
        if *finished.borrow_and_update() == 0 {
            let _ = tokio::time::timeout(self.timeout, finished.changed()).await;
        }
    }

    /// Runs one check (the upkeep task only: one at a time per model) and says when the
    /// next is due: an interval after this one, or [`Due::Retry`] while no check has ever
    /// concluded. An automatic table is built first when it has none yet (also with checks
    /// turned off: it is built once then), and rebuilt when the check finds the tokenizer
    /// changed; a build gets [`BUILD_TIMEOUTS`] check timeouts.
    pub async fn check(
        &self,
        backend: &dyn Backend,
        table: &ServedTable,
        in_flight: &InFlight,
    ) -> Due {
        let disabled = self.lock().verdict == Verdict::Disabled;
        if disabled && table.get().is_some() {
            return Due::Never;
        }
        {
            let mut state = self.lock();
            state.running = true;
            state.started = Some(Instant::now());
        }
        let bound = if table.is_auto() {
            self.timeout.saturating_mul(BUILD_TIMEOUTS)
        } else {
            self.timeout
        };
        let outcome = tokio::time::timeout(bound, self.check_or_build(backend, table, in_flight))
            .await
            .unwrap_or_else(|_| CheckOutcome::Inconclusive("the check timed out".into()));
        if disabled {
            return self.built_unchecked(outcome);
        }
        self.record(outcome);
        self.next_due(table)
    }

    /// When the check after the one just recorded is due: soon, with backoff, while no
    /// check has concluded or while an automatic table found wrong is not rebuilt yet (the
    /// model is disabled until it is); an interval later otherwise.
    fn next_due(&self, table: &ServedTable) -> Due {
        let state = self.lock();
        let rebuild_pending =
            state.verdict == Verdict::Mismatch && table.is_auto() && state.concluded == Some(false);
        if state.verdict == Verdict::Unchecked || rebuild_pending {
            Due::Retry
        } else {
            Due::In(self.interval)
        }
    }

    /// The check of the table served now; for an automatic table, built first when it has
    /// none and rebuilt when the check finds a mismatch (the tokenizer behind the model
    /// changed). The mismatch is applied before the rebuild starts, so requests get the 503
    /// while it runs and after it if it fails or times out: only a rebuilt table that
    /// passes its check lifts it. A build the tokenizer cannot support is a mismatch too.
    async fn check_or_build(
        &self,
        backend: &dyn Backend,
        table: &ServedTable,
        in_flight: &InFlight,
    ) -> CheckOutcome {
        if let Some(current) = table.get() {
            let outcome = check_once(backend, &current, in_flight).await;
            let CheckOutcome::Mismatch(why) = &outcome else {
                return outcome;
            };
            if !table.is_auto() {
                return outcome;
            }
            self.found_mismatch(why);
        }
        build_and_check(backend, table, in_flight).await
    }

    /// Disables the model now, ahead of the rebuild that may lift it (the check is still
    /// running, so [`Self::record`] closes it later).
    fn found_mismatch(&self, why: &str) {
        self.lock().verdict = Verdict::Mismatch;
        tracing::error!(
            reason = %why,
            "the serving tokenizer no longer matches the automatic token table; model disabled while it is rebuilt"
        );
    }

    /// With checks off, an automatic table's one build: retried until it is built, never
    /// checked again after.
    fn built_unchecked(&self, outcome: CheckOutcome) -> Due {
        self.lock().running = false;
        self.finished.send_modify(|n| *n += 1);
        match outcome {
            CheckOutcome::Match => Due::Never,
            CheckOutcome::Mismatch(why) | CheckOutcome::Inconclusive(why) => {
                tracing::warn!(reason = %why, "the automatic token table could not be built yet");
                Due::Retry
            }
        }
    }

    /// Applies a check's outcome.
    pub fn record(&self, outcome: CheckOutcome) {
        {
            let mut state = self.lock();
            state.running = false;
            state.finished_at = Some(SystemTime::now());
            state.concluded = Some(!matches!(outcome, CheckOutcome::Inconclusive(_)));
            match &outcome {
                CheckOutcome::Match => {
                    state.verdict = Verdict::Verified;
                    state.reason = None;
                }
                CheckOutcome::Mismatch(why) => {
                    state.verdict = Verdict::Mismatch;
                    state.reason = Some(why.clone());
                }
                CheckOutcome::Inconclusive(_) => {}
            }
        }
        match outcome {
            CheckOutcome::Match => tracing::debug!("token table verified against the backend"),
            CheckOutcome::Mismatch(why) => {
                tracing::error!(reason = %why, "token table does not match the serving tokenizer; model disabled")
            }
            CheckOutcome::Inconclusive(why) => {
                tracing::warn!(reason = %why, "token table check did not conclude; keeping the previous verdict")
            }
        }
        self.finished.send_modify(|n| *n += 1);
    }
}

/// How many check timeouts an automatic table's build and check may take together (a
/// build tokenizes ~10,400 texts where a check tokenizes a few hundred).
pub const BUILD_TIMEOUTS: u32 = 4;

/// Builds the automatic table from the serving tokenizer and checks the table built.
async fn build_and_check(
    backend: &dyn Backend,
    table: &ServedTable,
    in_flight: &InFlight,
) -> CheckOutcome {
    let started = Instant::now();
    match table.rebuild(backend, in_flight).await {
        Ok(()) => tracing::info!(
            build_ms = started.elapsed().as_secs_f64() * 1e3,
            "token table built from the backend's tokenizer"
        ),
        Err(LiveBuildError::Backend(e)) => return CheckOutcome::Inconclusive(e.to_string()),
        Err(LiveBuildError::Refused(e)) => return CheckOutcome::Mismatch(e.to_string()),
    }
    match table.get() {
        Some(built) => check_once(backend, &built, in_flight).await,
        None => CheckOutcome::Inconclusive("the table was not stored".into()),
    }
}

/// One check: tokenize the prefix and every labelled string in one call, compare.
pub async fn check_once(
    backend: &dyn Backend,
    table: &TokenTable,
    in_flight: &InFlight,
) -> CheckOutcome {
    let permit = in_flight.acquire().await;
    match backend.refuses_template(&table.prefix, permit).await {
        Ok(Some(tag)) => {
            return CheckOutcome::Mismatch(format!(
                "the chat template opens a reasoning block ({tag}) before the answer position"
            ))
        }
        Ok(None) => {}
        Err(e) => return CheckOutcome::Inconclusive(e.to_string()),
    }
    let texts = check_texts(table);
    let permit = in_flight.acquire().await;
    let tokens = match backend.tokenize(&texts, permit).await {
        Ok(tokens) => tokens,
        Err(e) => return CheckOutcome::Inconclusive(e.to_string()),
    };
    compare(table, &tokens)
}

/// The texts one check tokenizes, in one batch: the prefix, `prefix + number` for every
/// single-token label, then `prefix + text` for every multi-token label (schemes in table
/// order).
pub fn check_texts(table: &TokenTable) -> Vec<String> {
    let mut texts = Vec::with_capacity(1 + table.labels.len() + table.multi_label_count());
    texts.push(table.prefix.clone());
    texts.extend(
        table
            .labels
            .iter()
            .map(|l| format!("{}{}", table.prefix, l.number)),
    );
    texts.extend(
        table
            .multi_labels()
            .map(|(_, l)| format!("{}{}", table.prefix, l.text)),
    );
    texts
}

/// Compares a backend's tokens for [`check_texts`] with the table.
pub fn compare(table: &TokenTable, tokens: &[Vec<u32>]) -> CheckOutcome {
    let expected = 1 + table.labels.len() + table.multi_label_count();
    if tokens.len() != expected {
        return CheckOutcome::Inconclusive(format!(
            "asked to tokenize {expected} texts, got {}",
            tokens.len()
        ));
    }
    let prefix = &tokens[0];
    if !prefix.ends_with(&table.prefix_ids) {
        return CheckOutcome::Mismatch(format!(
            "the prefix tokenizes as {prefix:?}, the table says {:?}",
            table.prefix_ids
        ));
    }
    let (singles, multi) = tokens[1..].split_at(table.labels.len());
    for (label, got) in table.labels.iter().zip(singles) {
        let single = got.len() == prefix.len() + 1 && got.starts_with(prefix);
        if !single || got.last() != Some(&label.id) {
            return CheckOutcome::Mismatch(format!(
                "label {} tokenizes as {got:?} after the prefix {prefix:?}; the table says id {}",
                label.number, label.id
            ));
        }
    }
    for ((scheme, label), got) in table.multi_labels().zip(multi) {
        if got.strip_prefix(prefix.as_slice()) != Some(label.ids.as_slice()) {
            return CheckOutcome::Mismatch(format!(
                "multi-token label {:?} ({}) tokenizes as {got:?} after the prefix {prefix:?}; \
                 the table says ids {:?}",
                label.text,
                scheme.describe(),
                label.ids
            ));
        }
    }
    CheckOutcome::Match
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped Gemma 3 table as the default model serves it (numerals, no letters).
    fn table() -> TokenTable {
        TokenTable::load("gemma-3").expect("ships").numerals_only()
    }

    /// What a serving tokenizer that matches `t` returns: the prefix, then prefix + label
    /// for the single-token labels, then prefix + ids for the multi-token ones.
    fn serving_tokens(t: &TokenTable) -> Vec<Vec<u32>> {
        let mut tokens = vec![t.prefix_ids.clone()];
        tokens.extend(
            t.labels
                .iter()
                .map(|l| [t.prefix_ids.clone(), vec![l.id]].concat()),
        );
        tokens.extend(
            t.multi_labels()
                .map(|(_, l)| [t.prefix_ids.clone(), l.ids.clone()].concat()),
        );
        tokens
    }

    #[test]
    fn the_batch_holds_the_prefix_every_label_and_every_multi_token_label() {
        let t = table();
        assert_eq!(t.multi_label_count(), 355, "00–99 and 000–254");
        let texts = check_texts(&t);
        assert_eq!(texts.len(), 1 + 10 + 100 + 255);
        assert_eq!(texts[0], "answer=");
        assert_eq!(texts[1], "answer=0");
        assert_eq!(texts[10], "answer=9");
        assert_eq!(texts[11], "answer=00");
        assert_eq!(texts[110], "answer=99");
        assert_eq!(texts[111], "answer=000");
        assert_eq!(texts[365], "answer=254");
        let golden = TokenTable::load("golden-fake").expect("ships");
        assert_eq!(check_texts(&golden).len(), 192, "no multi-token section");
        // A model with `label_scheme = "letters"` checks its letters too.
        let letters = TokenTable::load("gemma-3")
            .expect("ships")
            .with_label_scheme(crate::config::LabelScheme::Letters)
            .expect("gemma-3 has letters");
        let texts = check_texts(&letters);
        assert_eq!(texts.len(), 1 + 10 + 52 + 100 + 255);
        assert_eq!(
            (texts[11].as_str(), texts[62].as_str()),
            ("answer=A", "answer=z")
        );
    }

    #[test]
    fn a_changed_multi_token_label_is_a_mismatch_with_or_without_bos() {
        let t = table();
        let tokens = serving_tokens(&t);
        let with_bos: Vec<Vec<u32>> = tokens
            .iter()
            .map(|ts| [vec![2], ts.clone()].concat())
            .collect();
        assert_eq!(compare(&t, &with_bos), CheckOutcome::Match);
        // "answer=07" (index 1 + 10 + 7) now ends in another id.
        let mut changed = with_bos.clone();
        *changed[18].last_mut().expect("ids") += 1;
        match compare(&t, &changed) {
            CheckOutcome::Mismatch(why) => assert!(why.contains("\"07\""), "{why}"),
            other => panic!("expected a mismatch, got {other:?}"),
        }
        // "answer=254" (the last) split into one token more.
        let mut split = tokens.clone();
        split[365].push(9);
        match compare(&t, &split) {
            CheckOutcome::Mismatch(why) => assert!(why.contains("\"254\""), "{why}"),
            other => panic!("expected a mismatch, got {other:?}"),
        }
        // One text short: the multi-token labels were not all answered.
        assert!(matches!(
            compare(&t, &tokens[..365]),
            CheckOutcome::Inconclusive(_)
        ));
    }

    #[test]
    fn matching_tokens_with_or_without_bos_pass() {
        let t = table();
        let tokens = serving_tokens(&t);
        assert_eq!(compare(&t, &tokens), CheckOutcome::Match);
        let with_bos: Vec<Vec<u32>> = tokens
            .iter()
            .map(|ts| [vec![2], ts.clone()].concat())
            .collect();
        assert_eq!(compare(&t, &with_bos), CheckOutcome::Match);
    }

    #[test]
    fn a_changed_id_or_split_label_is_a_mismatch() {
        let t = table();
        let tokens = serving_tokens(&t);
        let mut changed = tokens.clone();
        changed[3] = [t.prefix_ids.clone(), vec![7]].concat();
        assert!(matches!(compare(&t, &changed), CheckOutcome::Mismatch(_)));
        let mut split = tokens.clone();
        split[2].push(9);
        assert!(matches!(compare(&t, &split), CheckOutcome::Mismatch(_)));
        assert!(matches!(
            compare(&t, &tokens[1..]),
            CheckOutcome::Inconclusive(_)
        ));
    }
}
