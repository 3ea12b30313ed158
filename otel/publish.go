// The producer side: a publisher whose every publish runs in a send span
// whose context rides with the message as W3C trace context.

package otel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// EnvelopePublisher is what Publisher wraps: *artemis.Publisher and
// *artemis.ClientPublisher have these methods.
type EnvelopePublisher interface {
	Publish(ctx context.Context, m artemis.Outgoing, opts ...artemis.PublishOption) (string, error)
	PublishWithReceipt(ctx context.Context, m artemis.Outgoing, opts ...artemis.PublishOption) (*artemis.Receipt, error)
}

// Publisher publishes through an artemis publisher, each publish in a span
// "send <queue>" of kind producer, child of the span in the caller's ctx,
// whose context it injects into the message's headers. Its methods are
// those of artemis.Publisher, with the same results and errors.
type Publisher struct {
	p     EnvelopePublisher
	t     *Telemetry
	queue string
	attrs []attribute.KeyValue // what every send span of the queue carries
}

// Publisher wraps p, which publishes to queue (the name given to
// artemis.NewPublisher or Client.Publisher: it becomes the envelopes'
// meta.queue and the spans' destination).
func (t *Telemetry) Publisher(p EnvelopePublisher, queue string) *Publisher {
	attrs := append([]attribute.KeyValue{
		semconv.MessagingSystemActiveMQ,
		semconv.MessagingOperationName("send"),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingDestinationName(queue),
	}, t.server...)
	return &Publisher{p: p, t: t, queue: queue, attrs: attrs}
}

// Publish publishes m, as artemis.Publisher.Publish does, in a send span.
// For an artemis.Job without an artemis.EnvelopeTraceID, the envelope's
// trace_id is the span's trace id (UUIDOf), so a consumer that reads no
// headers still finds the trace; with one, the given trace_id is kept (a
// conversation goes on) and the traceparent header alone carries the span.
// An envelope already built, or encoded, keeps its trace_id.
func (p *Publisher) Publish(ctx context.Context, m artemis.Outgoing, opts ...artemis.PublishOption) (string, error) {
	ctx, span := p.start(ctx)
	env, send := p.envelope(span.SpanContext(), m)
	id, err := p.p.Publish(ctx, send, p.inject(ctx, opts)...)
	p.end(span, env, err)
	return id, err
}

// PublishWithReceipt starts the publish of m, as
// artemis.Publisher.PublishWithReceipt does, with the envelope Publish
// gives it. The send span ends when the broker's outcome is known (a
// goroutine waits for the receipt, which every publisher resolves), not
// when the call returns.
func (p *Publisher) PublishWithReceipt(ctx context.Context, m artemis.Outgoing, opts ...artemis.PublishOption) (*artemis.Receipt, error) {
	ctx, span := p.start(ctx)
	env, send := p.envelope(span.SpanContext(), m)
	r, err := p.p.PublishWithReceipt(ctx, send, p.inject(ctx, opts)...)
	if err != nil {
		p.end(span, env, err)
		return nil, err
	}
	return p.endOnOutcome(span, env, r), nil
}

// endOnOutcome ends span once r's outcome is known.
func (p *Publisher) endOnOutcome(span trace.Span, env *artemis.Envelope, r *artemis.Receipt) *artemis.Receipt {
	go func() {
		<-r.Done()
		// Done is closed: Wait returns the outcome at once.
		p.end(span, env, r.Wait(context.Background()))
	}()
	return r
}

// start starts the send span under the caller's ctx.
func (p *Publisher) start(ctx context.Context) (context.Context, trace.Span) {
	return p.t.tracer.Start(ctx, spanName("send", p.queue),
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(p.attrs...))
}

// envelope is the envelope m stands for (nil when it is none: the
// library's publish refuses it the same way, and tells the Observer; the
// span records what it returns), and what to publish: a Job's envelope
// built with meta.queue the queue and the span's trace id unless the Job
// gives one; anything else as it is.
func (p *Publisher) envelope(sc trace.SpanContext, m artemis.Outgoing) (*artemis.Envelope, artemis.Outgoing) {
	defaults := make([]artemis.EnvelopeOption, 0, 2)
	defaults = append(defaults, artemis.EnvelopeQueue(p.queue))
	if sc.TraceID().IsValid() {
		defaults = append(defaults, artemis.EnvelopeTraceID(UUIDOf(sc.TraceID())))
	}
	env, err := artemis.EnvelopeOf(m, defaults...)
	if err != nil {
		return nil, m
	}
	switch m.(type) {
	case *artemis.Envelope, artemis.Encoded:
		return env, m
	}
	return env, env
}

// inject adds the span context of ctx to the headers of the publish, after
// the caller's own options, so a traceparent forwarded from another
// message gives way to this span's.
func (p *Publisher) inject(ctx context.Context, opts []artemis.PublishOption) []artemis.PublishOption {
	carrier := artemis.HeaderCarrier{}
	p.t.prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return opts
	}
	return append(opts[:len(opts):len(opts)], artemis.WithHeaders(carrier))
}

// end sets what the publish tells the span, and ends it.
func (p *Publisher) end(span trace.Span, env *artemis.Envelope, err error) {
	if env != nil {
		span.SetAttributes(
			semconv.MessagingMessageID(env.Meta.ID),
			semconv.MessagingMessageConversationID(env.TraceID),
			attribute.String("babelqueue.urn", env.URN),
		)
	}
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(publishErrorType(err)))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// publishErrorType is error.type of a failed publish: the names of
// artemis.PublishOutcome.
func publishErrorType(err error) string {
	switch {
	case errors.Is(err, artemis.ErrNotAccepted):
		return artemis.PublishNotAccepted.String()
	case errors.Is(err, artemis.ErrOutcomeUnknown):
		return artemis.PublishUnknown.String()
	}
	return artemis.PublishFailed.String()
}

// spanName is "<operation> <queue>", or the operation alone when the queue
// is not known, as the conventions name messaging spans.
func spanName(op, queue string) string {
	if queue == "" {
		return op
	}
	return op + " " + queue
}
