//! [`LimitStore`]: where per-key counts live, the interface the three stores implement.

use std::fmt;
use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt};

use super::clock::Now;
use super::key::KeyQuota;
use super::refusal::Refusal;
use super::usage::{batch_usage_name, Charge, UsageCounts, UsageRow};

/// Days a usage record is kept (Redis expiry; the embedded store keeps them all).
pub const USAGE_RETENTION_DAYS: u64 = 400;

/// Why a store could not answer (logged without any key or caller content).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// No answer within the bound (`--limits-timeout-ms`).
    #[error("the limit store did not answer within --limits-timeout-ms")]
    Timeout,
    #[error("the limit store is unreachable: {0}")]
    Unavailable(String),
    #[error("the limit store failed: {0}")]
    Failed(String),
}

impl StoreError {
    /// The metrics label.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Failed(_) => "error",
        }
    }
}

/// A store's answer to a limit check: the store failed, or the limit's verdict.
pub type Checked = Result<Result<(), Refusal>, StoreError>;

/// Where per-key counts live. Object-safe: [`super::Quotas`] holds one as `Arc<dyn LimitStore>`.
pub trait LimitStore: Send + Sync + fmt::Debug {
    /// `memory`, `embedded` or `redis` (metrics label, `/readyz`).
    fn kind(&self) -> &'static str;
    /// Whether calls leave the process (then [`super::Quotas`] bounds each by its timeout and
    /// applies the failure policy).
    fn remote(&self) -> bool;
    /// Counts one request against the key's requests per minute.
    fn take_request<'a>(&'a self, key: &'a Arc<KeyQuota>, now: Now) -> BoxFuture<'a, Checked>;
    /// Counts `questions` against the key's questions per minute and daily cap, taking
    /// nothing from either when one refuses.
    fn take_questions<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        questions: usize,
        now: Now,
    ) -> BoxFuture<'a, Checked>;
    /// Gives back `questions` of `day`'s count.
    fn refund<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
        questions: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// [`LimitStore::take_questions`] for a batch line, `line` its request id (the same
    /// every time the line runs): a store that keeps admitted ids (the embedded one, in the
    /// same transaction as the count; Redis, in the same script) admits a line it holds
    /// without counting it again, so a line run again after a crash counts once against the
    /// daily cap. This default counts every run: memory does not outlive the process.
    fn take_line_questions<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        questions: usize,
        now: Now,
        _line: &'a str,
    ) -> BoxFuture<'a, Checked> {
        self.take_questions(key, questions, now)
    }
    /// [`LimitStore::refund`] of a batch line's admission: the store forgets its id too, so
    /// the line counts again if it runs again.
    fn refund_line<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
        questions: u64,
        _line: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.refund(key, day, questions)
    }
    /// Adds `counts` to `name`'s usage on `day`.
    fn record<'a>(
        &'a self,
        name: &'a str,
        day: u64,
        counts: UsageCounts,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Adds each batch line's counts to its caller's usage and batch counters on `day`, each
    /// charge once where the store keeps charge ids: the embedded store (in the same
    /// transaction as the counts) and Redis (in the same script) do, so a line run again
    /// after a kill -9 adds nothing. This default adds every charge: memory does not outlive
    /// the process.
    fn charge<'a>(
        &'a self,
        day: u64,
        charges: &'a [Charge],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        async move {
            for charge in charges {
                self.record(&charge.name, day, charge.counts).await?;
                let batch = batch_usage_name(&charge.name);
                self.record(&batch, day, charge.counts).await?;
            }
            Ok(())
        }
        .boxed()
    }
    /// Usage of `names` on the days `from..=to` (days with no usage left out).
    fn usage<'a>(
        &'a self,
        names: &'a [String],
        from: u64,
        to: u64,
    ) -> BoxFuture<'a, Result<Vec<UsageRow>, StoreError>>;
    /// Questions counted for the key on `day` (tests, the operator).
    fn daily_used<'a>(
        &'a self,
        key: &'a Arc<KeyQuota>,
        day: u64,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
    /// Checks that the store answers (`/readyz`).
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>>;
}
