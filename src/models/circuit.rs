//! The circuit breaker: one per model's backend, so a failing backend is refused up front
//! instead of being sent every request.
//!
//! * **Closed**: requests pass, and each finished one is counted in a sliding window of the
//!   last `window` (resilience4j's time-based window; Envoy's failure-percentage outlier
//!   detection): a failure when the backend said 429 or 5xx, a read timed out or it was
//!   unreachable, a success when it answered. Once the window holds `min_calls` requests
//!   and `failure_rate` percent of them failed, the circuit opens. A rate, not a run of
//!   failures: under load a stall ends several reads at once (five read timeouts within
//!   130 ms at 5% faults: a rule of five in a row opens on them, and refuses 83% of a
//!   10,000-request run), and a rate judges them against the answers around them, while a
//!   backend failing every request still opens it after `min_calls` of them. Outcomes that
//!   say nothing about the backend's health (a protocol break, the caller's deadline, a
//!   client-side 4xx) are not counted; a fleet counts a replica's protocol break as a
//!   failure once another replica answered the same request (`engine::pipeline`).
//! * **A replica's run of failures** ([`Circuit::replica`]): a replica of a fleet also
//!   opens after `eject_after` failures in a row with no success between (Envoy's
//!   consecutive gateway failures), so a hung replica is skipped after a few read
//!   timeouts rather than after `min_calls` of them, however long the read timeout is
//!   against the window. A run is not the rule for a model's own backend, where opening
//!   refuses callers; for a replica it only moves its keys to the next in their order, and
//!   the fleet spares the last replica still closed ([`Ticket::record_sparing`]), so a
//!   stall that hits every replica at once cannot take them all out by this rule.
//! * **Open**: every request is refused with 503 `system_one_circuit_open` and a
//!   `Retry-After` until the cool-down ends, without contacting the backend. A model with a
//!   `fallback` is served by the fallback meanwhile.
//! * **Half-open**: after the cool-down one probe request goes through; others are still
//!   refused (or fall back). The probe's success closes the circuit (with an empty window:
//!   the failures that opened it are spent), its failure opens it for another cool-down,
//!   and a probe that ends neither way (cancelled, protocol break) lets the next request
//!   probe.
//!
//! Outcomes are counted per caller request, not per upstream read: a request's reads
//! succeed or fail together (the first failure cancels the rest). Time is tokio's, so
//! paused-time tests cross the window and the cool-down with `tokio::time::advance`.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::CircuitSettings;
use crate::error::{ApiError, Code, MAX_RETRY_AFTER_SECS};

/// The state as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    Closed,
    Open,
    HalfOpen,
}

impl CircuitState {
    /// The gauge value: 0 closed, 1 open, 2 half-open.
    pub fn as_metric(self) -> i64 {
        match self {
            CircuitState::Closed => 0,
            CircuitState::Open => 1,
            CircuitState::HalfOpen => 2,
        }
    }

    /// A word for `/readyz`.
    pub fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::HalfOpen => "half_open",
        }
    }
}

/// What a finished request says about the backend's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// The backend answered.
    Success,
    /// 429, 5xx, a timeout or no connection.
    Failure,
    /// Nothing either way.
    Neutral,
}

/// The circuit is refusing requests; retry after this many seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitOpen {
    pub retry_after: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { probing: bool },
}

/// Slices of the window: outcomes age out a tenth of the window at a time.
const SLICES: usize = 10;

/// The successes and failures of the last `window`, counted per slice of `window / SLICES`
/// in a ring: a slot is reset when a newer slice takes it, and only the last `SLICES`
/// slices are summed, so the window reaches back between 9/10 and all of its length, in
/// constant memory whatever the request rate.
#[derive(Debug)]
struct Window {
    /// One slice's length (at least 1 ms).
    slice: Duration,
    /// Where slice 0 begins (the circuit's creation).
    origin: Instant,
    /// Slot `n % SLICES` holds slice `n`.
    slots: [Slice; SLICES],
}

/// The outcomes counted in one slice of the window.
#[derive(Debug, Clone, Copy, Default)]
struct Slice {
    /// Which slice (counted from the window's origin) the counts belong to.
    index: u64,
    /// Requests that succeeded or failed.
    calls: u32,
    /// Of which failed.
    failures: u32,
}

impl Window {
    fn new(length: Duration, origin: Instant) -> Self {
        Window {
            slice: (length / SLICES as u32).max(Duration::from_millis(1)),
            origin,
            slots: [Slice::default(); SLICES],
        }
    }

    /// Counts one outcome at `now`; returns the window's calls and failures with it.
    fn count(&mut self, now: Instant, failed: bool) -> (u32, u32) {
        let since = now.saturating_duration_since(self.origin).as_nanos();
        let index = u64::try_from(since / self.slice.as_nanos()).unwrap_or(u64::MAX);
        let slot = &mut self.slots[(index % SLICES as u64) as usize];
        if slot.index != index {
            *slot = Slice {
                index,
                ..Slice::default()
            };
        }
        slot.calls = slot.calls.saturating_add(1);
        slot.failures = slot.failures.saturating_add(u32::from(failed));
        self.slots
            .iter()
            .filter(|s| index.saturating_sub(s.index) < SLICES as u64)
            .fold((0, 0), |(calls, failures): (u32, u32), s| {
                (
                    calls.saturating_add(s.calls),
                    failures.saturating_add(s.failures),
                )
            })
    }

    /// Forgets every outcome.
    fn clear(&mut self) {
        self.slots = [Slice::default(); SLICES];
    }
}

/// What the lock guards.
#[derive(Debug)]
struct Inner {
    state: State,
    /// Outcomes while closed; cleared when the circuit opens.
    window: Window,
    /// Failures in a row while closed, with no success between.
    run: u32,
}

/// One backend's breaker.
#[derive(Debug)]
pub struct Circuit {
    /// The model it guards, for logs.
    model: String,
    /// The rate, window and minimum that open it and how long it stays open.
    settings: CircuitSettings,
    /// Failures in a row that open it (a replica's rule; 0: off).
    run_limit: u32,
    /// The current state and window; never held across an await.
    inner: Mutex<Inner>,
}

/// Permission to send one request to the backend; its outcome goes back through
/// [`Ticket::record`]. Dropped without a record (a cancelled request) it counts as neutral.
#[derive(Debug)]
pub struct Ticket<'a> {
    circuit: &'a Circuit,
    /// Whether this request is the half-open probe.
    probe: bool,
    /// Whether the outcome was recorded.
    done: bool,
}

fn secs_until(until: Instant, now: Instant) -> u64 {
    let wait = until.saturating_duration_since(now);
    (wait.as_secs_f64().ceil() as u64).clamp(1, MAX_RETRY_AFTER_SECS)
}

impl Circuit {
    /// A closed circuit for `model`'s backend: the failure rate alone opens it.
    pub fn new(model: impl Into<String>, settings: CircuitSettings) -> Self {
        Circuit {
            model: model.into(),
            settings,
            run_limit: 0,
            inner: Mutex::new(Inner {
                state: State::Closed,
                window: Window::new(settings.window, Instant::now()),
                run: 0,
            }),
        }
    }

    /// A closed circuit for one replica of a fleet: the failure rate, or `eject_after`
    /// failures in a row, opens it.
    pub fn replica(name: impl Into<String>, settings: CircuitSettings) -> Self {
        Circuit {
            run_limit: settings.eject_after,
            ..Circuit::new(name, settings)
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a request would be refused now, without taking the probe slot.
    pub fn check(&self) -> Result<(), CircuitOpen> {
        let now = Instant::now();
        match self.lock().state {
            State::Open { until } if now < until => Err(CircuitOpen {
                retry_after: secs_until(until, now),
            }),
            State::HalfOpen { probing: true } => Err(CircuitOpen { retry_after: 1 }),
            _ => Ok(()),
        }
    }

    /// Lets a request through (as the probe, when half-open) or refuses it.
    pub fn admit(&self) -> Result<Ticket<'_>, CircuitOpen> {
        let now = Instant::now();
        let mut inner = self.lock();
        let probe = match inner.state {
            State::Closed => false,
            State::Open { until } if now < until => {
                return Err(CircuitOpen {
                    retry_after: secs_until(until, now),
                })
            }
            State::Open { .. } | State::HalfOpen { probing: false } => {
                inner.state = State::HalfOpen { probing: true };
                tracing::info!(model = %self.model, "circuit half-open: sending a probe");
                true
            }
            State::HalfOpen { probing: true } => return Err(CircuitOpen { retry_after: 1 }),
        };
        Ok(Ticket {
            circuit: self,
            probe,
            done: false,
        })
    }

    /// The state for `/metrics` (an open circuit past its cool-down shows as half-open).
    pub fn state(&self) -> CircuitState {
        match self.lock().state {
            State::Closed => CircuitState::Closed,
            State::Open { until } if Instant::now() < until => CircuitState::Open,
            State::Open { .. } | State::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    fn record(&self, probe: bool, health: Health, spared: bool) {
        if self.settings.failure_rate == 0 {
            return;
        }
        let now = Instant::now();
        let mut inner = self.lock();
        let next = match (inner.state, health) {
            (State::HalfOpen { .. }, Health::Success) if probe => {
                tracing::info!(model = %self.model, "circuit closed: the probe succeeded");
                inner.run = 0;
                State::Closed
            }
            (State::HalfOpen { .. }, Health::Failure) if probe => {
                tracing::warn!(model = %self.model, cooldown_secs = self.settings.cooldown.as_secs_f64(), "circuit opened again: the probe failed");
                State::Open {
                    until: now + self.settings.cooldown,
                }
            }
            (State::HalfOpen { .. }, Health::Neutral) if probe => {
                State::HalfOpen { probing: false }
            }
            (State::Closed, Health::Success | Health::Failure) => {
                let failed = health == Health::Failure;
                inner.run = if failed {
                    inner.run.saturating_add(1)
                } else {
                    0
                };
                let (calls, failures) = inner.window.count(now, failed);
                let by_run = !spared && self.run_limit > 0 && inner.run >= self.run_limit;
                if !by_run && !self.trips(calls, failures) {
                    return;
                }
                let run = std::mem::take(&mut inner.run);
                inner.window.clear();
                tracing::warn!(
                    model = %self.model,
                    calls,
                    failures,
                    failures_in_a_row = run,
                    window_secs = self.settings.window.as_secs_f64(),
                    cooldown_secs = self.settings.cooldown.as_secs_f64(),
                    "circuit opened: the backend's failure rate, or a replica's failures in a row, reached the threshold"
                );
                State::Open {
                    until: now + self.settings.cooldown,
                }
            }
            // Requests admitted before the circuit opened say nothing about the probe.
            (other, _) => other,
        };
        inner.state = next;
    }

    /// Whether `failures` of `calls` in the window open the circuit: enough calls to be a
    /// rate, and the rate at or above the threshold.
    fn trips(&self, calls: u32, failures: u32) -> bool {
        calls >= self.settings.min_calls
            && u64::from(failures) * 100 >= u64::from(self.settings.failure_rate) * u64::from(calls)
    }
}

impl Ticket<'_> {
    /// Records how the request went.
    pub fn record(mut self, health: Health) {
        self.done = true;
        self.circuit.record(self.probe, health, false);
    }

    /// Records how the request went, without letting a run of failures open the circuit
    /// (the failure rate still may): the fleet's last replica still closed.
    pub fn record_sparing(mut self, health: Health) {
        self.done = true;
        self.circuit.record(self.probe, health, true);
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.circuit.record(self.probe, Health::Neutral, false);
        }
    }
}

impl From<CircuitOpen> for ApiError {
    fn from(open: CircuitOpen) -> Self {
        ApiError::new(
            Code::CircuitOpen,
            "the model's backend is failing and its circuit breaker is open; retry later",
        )
        .retry_after(open.retry_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opens at 50% of at least 10 requests in a 10 s window; 10 s cool-down.
    fn settings() -> CircuitSettings {
        CircuitSettings {
            failure_rate: 50,
            min_calls: 10,
            window: Duration::from_secs(10),
            cooldown: Duration::from_secs(10),
            eject_after: 5,
        }
    }

    fn circuit() -> Circuit {
        Circuit::new("m", settings())
    }

    fn fail(c: &Circuit) {
        c.admit().expect("admitted").record(Health::Failure);
    }

    /// Opens the circuit: `min_calls` failures.
    fn trip(c: &Circuit) {
        (0..settings().min_calls).for_each(|_| fail(c));
        assert_eq!(c.state(), CircuitState::Open);
    }

    /// One step of a scenario.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// This many requests succeed, one after another.
        Succeed(u32),
        /// This many fail.
        Fail(u32),
        /// This many end saying nothing about the backend.
        Neutral(u32),
        /// This many milliseconds pass.
        Wait(u64),
    }

    async fn run(c: &Circuit, steps: &[Step]) {
        for step in steps {
            let (n, health) = match *step {
                Step::Succeed(n) => (n, Health::Success),
                Step::Fail(n) => (n, Health::Failure),
                Step::Neutral(n) => (n, Health::Neutral),
                Step::Wait(ms) => {
                    tokio::time::advance(Duration::from_millis(ms)).await;
                    continue;
                }
            };
            for _ in 0..n {
                if let Ok(ticket) = c.admit() {
                    ticket.record(health);
                }
            }
        }
    }

    /// The failure rate over the window, once it holds the minimum of calls, opens the
    /// circuit; runs of failures among enough successes, too few calls, neutral outcomes
    /// and failures older than the window do not.
    #[tokio::test(start_paused = true)]
    async fn the_failure_rate_over_the_window_opens_it() {
        use CircuitState::{Closed, Open};
        use Step::*;
        let bursts: Vec<Step> = (0..50).flat_map(|_| [Succeed(95), Fail(5)]).collect();
        let just_below: Vec<Step> = (0..100).flat_map(|_| [Succeed(10), Fail(9)]).collect();
        let spread: Vec<Step> = (0..200)
            .flat_map(|_| [Succeed(19), Fail(1), Wait(50)])
            .collect();
        let cases: Vec<(&str, Vec<Step>, CircuitState)> = vec![
            ("5% failing in runs of 5 never opens", bursts, Closed),
            ("5% failing over 10 s of time never opens", spread, Closed),
            ("a rate just below 50% never opens", just_below, Closed),
            ("fewer than the minimum, all failing", vec![Fail(9)], Closed),
            ("the minimum, all failing, opens", vec![Fail(10)], Open),
            (
                "the threshold itself opens",
                vec![Succeed(5), Fail(5)],
                Open,
            ),
            (
                "over the minimum, below the rate",
                vec![Succeed(11), Fail(10)],
                Closed,
            ),
            (
                "neutral outcomes are not calls",
                vec![Neutral(100), Fail(9)],
                Closed,
            ),
            (
                "neutrals do not dilute",
                vec![Fail(9), Neutral(100), Fail(1)],
                Open,
            ),
            (
                "failures age out",
                vec![Fail(9), Wait(10_000), Fail(9)],
                Closed,
            ),
            (
                "successes age out too",
                vec![Succeed(100), Wait(10_000), Fail(10)],
                Open,
            ),
            (
                "within the window they add up",
                vec![Fail(5), Wait(5_000), Fail(5)],
                Open,
            ),
        ];
        for (why, steps, want) in cases {
            let c = circuit();
            run(&c, &steps).await;
            assert_eq!(c.state(), want, "{why}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_circuit_refuses_for_the_rest_of_its_cool_down() {
        let c = circuit();
        trip(&c);
        assert_eq!(
            c.admit().expect_err("refused"),
            CircuitOpen { retry_after: 10 }
        );
        tokio::time::advance(Duration::from_millis(9_500)).await;
        assert_eq!(
            c.check().expect_err("refused"),
            CircuitOpen { retry_after: 1 }
        );
    }

    /// One probe after the cool-down; its success closes the circuit with an empty window,
    /// so the failures that opened it do not count again.
    #[tokio::test(start_paused = true)]
    async fn half_open_lets_one_probe_through_and_closes_on_its_success() {
        let c = circuit();
        trip(&c);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(c.state(), CircuitState::HalfOpen);
        assert!(c.check().is_ok());
        let probe = c.admit().expect("the probe");
        assert_eq!(
            c.admit().expect_err("refused"),
            CircuitOpen { retry_after: 1 }
        );
        assert!(c.check().is_err());
        probe.record(Health::Success);
        assert_eq!(c.state(), CircuitState::Closed);
        (0..settings().min_calls - 1).for_each(|_| fail(&c));
        assert_eq!(c.state(), CircuitState::Closed, "a fresh window");
        fail(&c);
        assert_eq!(c.state(), CircuitState::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens_and_a_dropped_one_frees_the_slot() {
        let c = circuit();
        trip(&c);
        tokio::time::advance(Duration::from_secs(10)).await;
        drop(c.admit().expect("probe"));
        assert_eq!(c.state(), CircuitState::HalfOpen);
        c.admit().expect("another probe").record(Health::Failure);
        assert_eq!(c.state(), CircuitState::Open);
        assert_eq!(
            c.check().expect_err("refused"),
            CircuitOpen { retry_after: 10 }
        );
    }

    /// Requests admitted before the circuit opened and finishing while it is open (or
    /// half-open, not being the probe) change nothing.
    #[tokio::test(start_paused = true)]
    async fn outcomes_of_requests_admitted_before_it_opened_are_ignored() {
        let c = circuit();
        let late: Vec<Ticket<'_>> = (0..3).map(|_| c.admit().expect("admitted")).collect();
        trip(&c);
        tokio::time::advance(Duration::from_secs(10)).await;
        let probe = c.admit().expect("the probe");
        for ticket in late {
            ticket.record(Health::Success);
        }
        assert!(c.check().is_err(), "still probing");
        probe.record(Health::Failure);
        assert_eq!(c.state(), CircuitState::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_rate_turns_the_breaker_off() {
        let c = Circuit::new(
            "m",
            CircuitSettings {
                failure_rate: 0,
                ..settings()
            },
        );
        (0..100).for_each(|_| fail(&c));
        assert_eq!(c.state(), CircuitState::Closed);
    }

    /// A replica's circuit opens after `eject_after` failures in a row, long before the
    /// window holds `min_calls`; a success between breaks the run, neutral outcomes do not,
    /// a model's own circuit has no such rule, and a spared replica (the fleet's last one
    /// closed) is judged by the rate alone.
    #[tokio::test(start_paused = true)]
    async fn a_replica_opens_after_a_run_of_failures() {
        use CircuitState::{Closed, Open};
        use Step::*;
        let cases: Vec<(&str, Vec<Step>, CircuitState)> = vec![
            ("five in a row open it", vec![Fail(5)], Open),
            ("four do not", vec![Fail(4)], Closed),
            (
                "a success breaks the run",
                vec![Fail(4), Succeed(1), Fail(4)],
                Closed,
            ),
            (
                "neutral outcomes do not break it",
                vec![Fail(3), Neutral(10), Fail(2)],
                Open,
            ),
            (
                "a run counts across the window's slices",
                vec![Fail(3), Wait(30_000), Fail(2)],
                Open,
            ),
        ];
        for (why, steps, want) in cases {
            let c = Circuit::replica("m at a:1", settings());
            run(&c, &steps).await;
            assert_eq!(c.state(), want, "{why}");
            let model = circuit();
            run(&model, &steps).await;
            assert_eq!(model.state(), Closed, "a model's circuit: {why}");
        }
        let spared = Circuit::replica("m at a:1", settings());
        for _ in 0..9 {
            spared
                .admit()
                .expect("admitted")
                .record_sparing(Health::Failure);
        }
        assert_eq!(spared.state(), Closed, "spared: the rate alone judges it");
        spared
            .admit()
            .expect("admitted")
            .record_sparing(Health::Failure);
        assert_eq!(spared.state(), Open, "the rate still opens a spared one");
    }
}
