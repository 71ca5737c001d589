"""Spans that nothing would receive are not made.

The OpenTelemetry SDK builds every span in full (attributes, event and link lists, locks,
the sampler's call) even when its provider has no span processor, i.e. when no exporter is
configured — the default server's case. There, an API call's span is only a context: its
trace id goes to log lines and on to the job's `traceparent`, and a caller's `traceparent`
must still be continued. `current_span` then makes a non-recording span with the ids the SDK
would have given with its default sampler (the parent's trace id and sampled flag, else a
new trace, sampled) and makes it current; with a processor, or another sampler, it is the
SDK's `start_as_current_span`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Sampler
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    TraceFlags,
    Tracer,
    get_current_span,
    use_span,
)

__all__ = ["current_span", "exporting", "unexported_context"]


def exporting(tracer: Tracer) -> bool:
    """Whether a span processor would receive `tracer`'s spans (read at each call: one may be
    added later). A tracer that is not the SDK's is assumed to export."""
    processor = getattr(tracer, "span_processor", None)
    return processor is None or bool(getattr(processor, "_span_processors", True))


@contextlib.contextmanager
def current_span(
    tracer: Tracer, name: str, parent: Context | None, *, on_exception: bool = True
) -> Iterator[Span]:
    """A span named `name`, child of `parent` (a context holding the caller's span, or None),
    current for the block; a non-recording one when nothing would receive it. With
    `on_exception=False` an exception leaving the block is neither recorded nor sets the
    status: the caller does both (a traceback is formatted for each recorded exception)."""
    own = unexported_context(tracer, parent)
    if own is None:
        with tracer.start_as_current_span(
            name,
            context=parent,
            record_exception=on_exception,
            set_status_on_exception=on_exception,
        ) as span:
            yield span
        return
    with use_span(NonRecordingSpan(own), end_on_exit=False) as span:
        yield span


def unexported_context(tracer: Tracer, parent: Context | None = None) -> SpanContext | None:
    """The ids a new child of `parent` (default: the current span) gets from `tracer`, when
    nothing would receive the span and the sampler is the default; else None (the SDK must
    make the span)."""
    ids = getattr(tracer, "id_generator", None)
    if ids is None or not _default(getattr(tracer, "sampler", None)) or exporting(tracer):
        return None
    above = get_current_span(parent).get_span_context()
    if above.is_valid:
        trace_id, flags = above.trace_id, above.trace_flags
    else:
        trace_id, flags = ids.generate_trace_id(), TraceFlags(TraceFlags.SAMPLED)
    return SpanContext(trace_id, ids.generate_span_id(), is_remote=False, trace_flags=flags)


@functools.lru_cache(maxsize=16)
def _default(sampler: Sampler | None) -> bool:
    """Whether `sampler` samples as the SDK's default does (parent-based, roots always)."""
    if sampler is None:
        return False
    default: str = DEFAULT_ON.get_description()  # type: ignore[no-untyped-call]
    return sampler.get_description() == default
