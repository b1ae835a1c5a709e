//! The circuit breaker: one per model's backend, so a failing backend is refused up front
//! instead of being sent every request.
//!
//! * **Closed**: requests pass; `failures` consecutive failed requests (the backend said
//!   429 or 5xx, a read timed out, or it was unreachable) open it. A success resets the
//!   count; outcomes that say nothing about the backend's health (a protocol break, the
//!   caller's deadline, a client-side 4xx) leave it alone.
//! * **Open**: every request is refused with 503 `system_one_circuit_open` and a
//!   `Retry-After` until the cool-down ends, without contacting the backend. A model with a
//!   `fallback` is served by the fallback meanwhile.
//! * **Half-open**: after the cool-down one probe request goes through; others are still
//!   refused (or fall back). The probe's success closes the circuit, its failure opens it
//!   for another cool-down, and a probe that ends neither way (cancelled, protocol break)
//!   lets the next request probe.
//!
//! Outcomes are counted per caller request, not per upstream read: a request's reads
//! succeed or fail together (the first failure cancels the rest). Time is tokio's, so
//! paused-time tests cross the cool-down with `tokio::time::advance`.

use std::sync::Mutex;

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
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probing: bool },
}

/// One backend's breaker.
#[derive(Debug)]
pub struct Circuit {
    /// The model it guards, for logs.
    model: String,
    /// How many failures open it and how long it stays open.
    settings: CircuitSettings,
    /// The current state; never held across an await.
    state: Mutex<State>,
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
    /// A closed circuit for `model`.
    pub fn new(model: impl Into<String>, settings: CircuitSettings) -> Self {
        Circuit {
            model: model.into(),
            settings,
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a request would be refused now, without taking the probe slot.
    pub fn check(&self) -> Result<(), CircuitOpen> {
        let now = Instant::now();
        match *self.lock() {
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
        let mut state = self.lock();
        let probe = match *state {
            State::Closed { .. } => false,
            State::Open { until } if now < until => {
                return Err(CircuitOpen {
                    retry_after: secs_until(until, now),
                })
            }
            State::Open { .. } | State::HalfOpen { probing: false } => {
                *state = State::HalfOpen { probing: true };
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
        match *self.lock() {
            State::Closed { .. } => CircuitState::Closed,
            State::Open { until } if Instant::now() < until => CircuitState::Open,
            State::Open { .. } | State::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    fn record(&self, probe: bool, health: Health) {
        if self.settings.failures == 0 {
            return;
        }
        let mut state = self.lock();
        let next = match (*state, health) {
            (State::HalfOpen { .. }, Health::Success) if probe => {
                tracing::info!(model = %self.model, "circuit closed: the probe succeeded");
                State::Closed { failures: 0 }
            }
            (State::HalfOpen { .. }, Health::Failure) if probe => {
                tracing::warn!(model = %self.model, cooldown_secs = self.settings.cooldown.as_secs_f64(), "circuit opened again: the probe failed");
                State::Open {
                    until: Instant::now() + self.settings.cooldown,
                }
            }
            (State::HalfOpen { .. }, Health::Neutral) if probe => {
                State::HalfOpen { probing: false }
            }
            (State::Closed { .. }, Health::Success) => State::Closed { failures: 0 },
            (State::Closed { failures }, Health::Failure) => {
                let failures = failures + 1;
                if failures >= self.settings.failures {
                    tracing::warn!(
                        model = %self.model,
                        failures,
                        cooldown_secs = self.settings.cooldown.as_secs_f64(),
                        "circuit opened: the backend failed repeatedly"
                    );
                    State::Open {
                        until: Instant::now() + self.settings.cooldown,
                    }
                } else {
                    State::Closed { failures }
                }
            }
            // Requests admitted before the circuit opened say nothing about the probe.
            (other, _) => other,
        };
        *state = next;
    }
}

impl Ticket<'_> {
    /// Records how the request went.
    pub fn record(mut self, health: Health) {
        self.done = true;
        self.circuit.record(self.probe, health);
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.circuit.record(self.probe, Health::Neutral);
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
    use std::time::Duration;

    fn circuit() -> Circuit {
        Circuit::new(
            "m",
            CircuitSettings {
                failures: 3,
                cooldown: Duration::from_secs(10),
            },
        )
    }

    fn fail(c: &Circuit) {
        c.admit().expect("admitted").record(Health::Failure);
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_only() {
        let c = circuit();
        fail(&c);
        fail(&c);
        c.admit().expect("admitted").record(Health::Success);
        fail(&c);
        fail(&c);
        c.admit().expect("admitted").record(Health::Neutral);
        assert_eq!(c.state(), CircuitState::Closed);
        fail(&c);
        assert_eq!(c.state(), CircuitState::Open);
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

    #[tokio::test(start_paused = true)]
    async fn half_open_lets_one_probe_through_and_closes_on_its_success() {
        let c = circuit();
        (0..3).for_each(|_| fail(&c));
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
        assert!(c.admit().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens_and_a_dropped_one_frees_the_slot() {
        let c = circuit();
        (0..3).for_each(|_| fail(&c));
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

    #[tokio::test(start_paused = true)]
    async fn zero_failures_turns_the_breaker_off() {
        let c = Circuit::new(
            "m",
            CircuitSettings {
                failures: 0,
                cooldown: Duration::from_secs(10),
            },
        );
        (0..100).for_each(|_| fail(&c));
        assert_eq!(c.state(), CircuitState::Closed);
    }
}
