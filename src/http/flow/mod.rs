//! The front-door flow: what every door (`/v1/systemone`, `/v1/decisions`, `/v2/rerank`)
//! does with the validated requests its body became, so that a new step is added once.
//!
//! A door parses and translates its body into [`crate::request::ValidRequest`]s (rerank: one per batch of
//! documents), hands them to [`run()`], and writes the [`AnsweredCall`]'s answers in its client's
//! shape, with the [`headers`] on the response. The flow owns the rest,
//! in this order:
//!
//! 1. note the model and question count for the summary line, observe the request;
//! 2. the serving model's circuit ticket (an open circuit refuses here, before the key's
//!    questions are counted);
//! 3. the key's questions per minute and per day, for every question of the call;
//! 4. the pipeline: the first request alone (it seats the shared prefix, and is the
//!    circuit's probe when half-open), the rest together, the call within one deadline;
//! 5. on failure, one refund rule: the questions of every request that sent no read are
//!    given back (a disabled model, a host that cannot be read, batches never started);
//! 6. escalation when unsure ([`escalate`]): the serving model's unsure answers asked
//!    again of its escalation model, within what is left of the deadline;
//! 7. on success, the key's usage ([`usage`]), the answers' metrics and the upstream requests noted (a
//!    required escalation that failed records the usage of what was sent, and its refusal
//!    on the ledger with that usage, before its error leaves);
//! 8. the ledger's record of the call, committed before the answer leaves ([`ledger_step`];
//!    under `fail_closed` a record not committed in time withholds the answer: 503).

mod answered;
mod escalate;
pub(super) mod headers;
pub(super) mod ledger_step;
mod run;
mod usage;

pub(super) use answered::AnsweredCall;
pub(super) use run::run;
