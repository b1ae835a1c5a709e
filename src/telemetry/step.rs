//! A request's steps in its trace (validation, the waits, each upstream read, decoding,
//! escalation, the ledger's commit): spans of the exported trace that are not `tracing`
//! spans.
//!
//! Why not `tracing` spans: with every request exported they cost +24 % CPU per answer at
//! 64 callers (docs/benchmarks/load.md), almost all of it `tracing`'s own machinery rather
//! than the export: a registry slab entry per span, an enter and exit through the
//! dispatcher, the registry's span stack and both layers' per-layer filters on every poll of
//! the future a span instruments, a walk up the parents to find the trace. A [`StepSpan`]
//! is one shared allocation holding its [`SpanRecord`]; the future it instruments swaps it
//! into a thread-local slot on each poll (two moves, no reference count); a child reads its
//! parent's context from that slot; the record is queued for export when the last handle
//! drops, as a `tracing` span closes. The request's SERVER span stays a `tracing` span (the
//! log's `request` span is its child); [`StepSpan::of`] stands for it in the slot, so its
//! steps find it without a look-up in the registry.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};

use super::annotate::{context_of, Annotations};
use super::context::{child_of, new_trace};
use super::queue::Queue;
use super::record::{now, SpanEvent, SpanRecord, TraceContext};

/// Where ended steps go: the export queue, set once when traces are installed.
pub(super) static QUEUE: OnceLock<Queue> = OnceLock::new();

thread_local! {
    /// The step whose future this thread is polling now (or the SERVER span's stand-in).
    static CURRENT: Cell<Option<Arc<Shared>>> = const { Cell::new(None) };
}

/// One step of an exported trace, or nothing (traces off, or the trace sampled out): a
/// handle, cloned into the futures it instruments; the span ends when the last one drops.
#[derive(Debug, Clone, Default)]
pub struct StepSpan(Option<Arc<Shared>>);

/// What the handles share: the step's context (its children's parent) and its record,
/// `None` in a stand-in for a `tracing` span (which records itself).
#[derive(Debug)]
struct Shared {
    context: TraceContext,
    record: Option<Mutex<SpanRecord>>,
}

impl Drop for Shared {
    /// The step ended: its record is queued for export.
    fn drop(&mut self) {
        let Some(record) = self.record.take() else {
            return;
        };
        let mut record = record.into_inner().unwrap_or_else(PoisonError::into_inner);
        record.end = now();
        if let Some(queue) = QUEUE.get() {
            queue.push(record);
        }
    }
}

/// A step named `name` under the current step (or `tracing` span), with its attributes as
/// `describe` sets them (`attributes`: how many, to size their list); nothing when traces
/// are off or the current trace is sampled out.
pub fn step(
    name: &'static str,
    attributes: usize,
    describe: impl FnOnce(&mut Annotations<'_>),
) -> StepSpan {
    if !super::on() {
        return StepSpan::none();
    }
    let context = match current_context() {
        Some(parent) if !parent.sampled => return StepSpan::none(),
        Some(parent) => (child_of(&parent), parent.span_id),
        None => (new_trace(), [0; 8]),
    };
    if !context.0.sampled {
        return StepSpan::none();
    }
    let mut record = SpanRecord::new(context.0.clone(), context.1, name, attributes);
    describe(&mut Annotations(&mut record));
    StepSpan(Some(Arc::new(Shared {
        context: context.0,
        record: Some(Mutex::new(record)),
    })))
}

impl StepSpan {
    /// No step: what a step is with traces off or its trace sampled out.
    pub fn none() -> Self {
        StepSpan(None)
    }

    /// A stand-in for `span` (a `tracing` span: the request's SERVER span), so the steps of
    /// a future it instruments find their parent without a look-up in the registry. One
    /// look-up, here; nothing when traces are off.
    pub fn of(span: &tracing::Span) -> Self {
        if !super::on() || span.is_disabled() {
            return StepSpan::none();
        }
        StepSpan(context_of(span).map(|context| {
            Arc::new(Shared {
                context,
                record: None,
            })
        }))
    }

    /// The step current on this thread (to carry it to another thread).
    pub fn current() -> Self {
        StepSpan(CURRENT.with(|c| {
            let current = c.take();
            c.set(current.clone());
            current
        }))
    }

    /// Runs `annotate` on the step's record, when it is one.
    pub fn annotate(&self, annotate: impl FnOnce(&mut Annotations<'_>)) {
        if let Some(record) = self.0.as_ref().and_then(|s| s.record.as_ref()) {
            let mut record = record.lock().unwrap_or_else(PoisonError::into_inner);
            annotate(&mut Annotations(&mut record));
        }
    }

    /// `future`, with this step current while it is polled.
    pub fn scope<F: Future>(self, future: F) -> InStep<F> {
        InStep {
            future,
            step: self.0,
        }
    }

    /// Runs `work` with this step current.
    pub fn in_scope<T>(&self, work: impl FnOnce() -> T) -> T {
        let Some(step) = &self.0 else {
            return work();
        };
        let mut slot = Some(step.clone());
        let _current = Current::enter(&mut slot);
        work()
    }
}

pin_project_lite::pin_project! {
    /// A future polled with its step current ([`StepSpan::scope`]).
    pub struct InStep<F> {
        #[pin]
        future: F,
        step: Option<Arc<Shared>>,
    }
}

impl<F: Future> Future for InStep<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if this.step.is_none() {
            return this.future.poll(cx);
        }
        let _current = Current::enter(this.step);
        this.future.poll(cx)
    }
}

/// The step in `slot` made current until this drops (a panic included), then put back.
struct Current<'a> {
    slot: &'a mut Option<Arc<Shared>>,
    before: Option<Arc<Shared>>,
}

impl<'a> Current<'a> {
    fn enter(slot: &'a mut Option<Arc<Shared>>) -> Self {
        let before = CURRENT.with(|c| c.replace(slot.take()));
        Current { slot, before }
    }
}

impl Drop for Current<'_> {
    fn drop(&mut self) {
        *self.slot = CURRENT.with(|c| c.replace(self.before.take()));
    }
}

/// The trace context of the current step, else of the current `tracing` span (or its
/// nearest exported ancestor).
pub(super) fn current_context() -> Option<TraceContext> {
    current_step_context().or_else(|| context_of(&tracing::Span::current()))
}

/// The current step's context, if a step (or a stand-in) is current.
pub(super) fn current_step_context() -> Option<TraceContext> {
    with_current(|step| step.context.clone())
}

/// Adds `event` to the current step when it has a record; gives it back otherwise (no
/// step current, or a stand-in: the event belongs to the `tracing` span).
pub(super) fn add_event(event: SpanEvent) -> Option<SpanEvent> {
    let mut event = Some(event);
    with_current(|step| {
        if let Some(record) = &step.record {
            if let Some(event) = event.take() {
                record
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .events
                    .push(event);
            }
        }
    });
    event
}

/// Runs `read` on the current step, if one is current.
fn with_current<T>(read: impl FnOnce(&Shared) -> T) -> Option<T> {
    CURRENT.with(|c| {
        let current = c.take();
        let out = current.as_deref().map(read);
        c.set(current);
        out
    })
}
