//! The `tracing` layer that makes the exported spans: a [`SpanRecord`] in each span of
//! [`TARGET`]'s extensions from its start, fields and events added as they come, queued for
//! export when the span closes.
//!
//! Why not `tracing-opentelemetry` and the SDK: they cost ~25 µs of CPU per answer at 64
//! callers (docs/benchmarks/load.md): a span builder and an OpenTelemetry context per span,
//! a `String` per attribute, a clock read and filter look-ups on every enter and exit (each
//! poll of an instrumented future), then a conversion of each span into OTLP's structs.
//! This layer does no work on enter or exit, reads the clock twice per span, and the export
//! task encodes the records straight to protobuf ([`super::encode`]).

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::context::{child_of, nearest_context, new_trace};
use super::queue::Queue;
use super::record::{now, EventFields, SpanEvent, SpanFields, SpanRecord};
use super::step;
use super::TARGET;

/// Makes, fills and queues the spans of [`TARGET`].
pub(super) struct SpanLayer {
    pub queue: Queue,
}

impl<S> Layer<S> for SpanLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// Only [`TARGET`]'s callsites: every other span and event never reaches this layer's
    /// work (the log's filter decides those alone).
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if metadata.target() == TARGET {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let metadata = attrs.metadata();
        if metadata.target() != TARGET {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        // A span made inside a step (none is, today) is that step's child.
        let parent = step::current_step_context()
            .or_else(|| span.parent().and_then(|p| nearest_context(&p)));
        let context = match parent {
            Some(parent) => (child_of(&parent), parent.span_id),
            None => (new_trace(), [0; 8]),
        };
        let root = context.1 == [0; 8];
        let mut record = SpanRecord::new(
            context.0,
            context.1,
            metadata.name(),
            metadata.fields().len(),
        );
        // A root's fields are kept even when it is sampled out: the caller's `traceparent`
        // (set just after, `continue_trace`) may sample it in.
        if record.context.sampled || root {
            attrs.record(&mut SpanFields(&mut record));
        }
        span.extensions_mut().insert(record);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(record) = extensions.get_mut::<SpanRecord>() {
            values.record(&mut SpanFields(record));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if event.metadata().target() != TARGET {
            return;
        }
        let mut added = SpanEvent {
            time: now(),
            name: String::new(),
            attributes: Vec::new(),
        };
        event.record(&mut EventFields(&mut added));
        // On the current step, when one is; else on the nearest exported `tracing` span.
        let Some(added) = step::add_event(added) else {
            return;
        };
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        for span in span.scope() {
            let mut extensions = span.extensions_mut();
            if let Some(record) = extensions.get_mut::<SpanRecord>() {
                if record.context.sampled {
                    record.events.push(added);
                }
                return;
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(mut record) = span.extensions_mut().remove::<SpanRecord>() else {
            return;
        };
        if record.context.sampled {
            record.end = now();
            self.queue.push(record);
        }
    }
}
