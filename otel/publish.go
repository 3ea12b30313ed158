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
	Publish(ctx context.Context, urn string, data any, opts ...artemis.BuildOption) (string, error)
	PublishEnvelope(ctx context.Context, env *artemis.Envelope, opts ...artemis.PublishOption) (string, error)
	PublishWithReceipt(ctx context.Context, urn string, data any, opts ...artemis.BuildOption) (*artemis.Receipt, error)
	PublishEnvelopeWithReceipt(ctx context.Context, env *artemis.Envelope, opts ...artemis.PublishOption) (*artemis.Receipt, error)
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

// Publish builds the envelope of urn and data and publishes it, as
// artemis.Publisher.Publish does, in a send span. Without an
// artemis.EnvelopeTraceID among opts, the envelope's trace_id is the
// span's trace id (UUIDOf), so a consumer that reads no headers still finds
// the trace; with one, the given trace_id is kept (a conversation goes on)
// and the traceparent header alone carries the span.
func (p *Publisher) Publish(ctx context.Context, urn string, data any, opts ...artemis.BuildOption) (string, error) {
	ctx, span := p.start(ctx)
	env, pubOpts, err := p.envelope(span.SpanContext(), urn, data, opts)
	if err != nil {
		// The library's own Publish refuses it the same way, and tells the
		// Observer; the span records what it returns.
		id, err := p.p.Publish(ctx, urn, data, opts...)
		p.end(span, nil, err)
		return id, err
	}
	id, err := p.p.PublishEnvelope(ctx, env, p.inject(ctx, pubOpts)...)
	p.end(span, env, err)
	return id, err
}

// PublishEnvelope publishes an envelope already built (forwarded,
// redriven), as artemis.Publisher.PublishEnvelope does, in a send span;
// the envelope keeps its trace_id.
func (p *Publisher) PublishEnvelope(ctx context.Context, env *artemis.Envelope, opts ...artemis.PublishOption) (string, error) {
	ctx, span := p.start(ctx)
	id, err := p.p.PublishEnvelope(ctx, env, p.inject(ctx, opts)...)
	p.end(span, env, err)
	return id, err
}

// PublishWithReceipt builds the envelope of urn and data as Publish does
// and starts its publish, as artemis.Publisher.PublishWithReceipt does.
// The send span ends when the broker's outcome is known (a goroutine waits
// for the receipt, which every publisher resolves), not when the call
// returns.
func (p *Publisher) PublishWithReceipt(ctx context.Context, urn string, data any, opts ...artemis.BuildOption) (*artemis.Receipt, error) {
	ctx, span := p.start(ctx)
	env, pubOpts, err := p.envelope(span.SpanContext(), urn, data, opts)
	if err != nil {
		r, err := p.p.PublishWithReceipt(ctx, urn, data, opts...)
		if err != nil {
			p.end(span, nil, err)
			return nil, err
		}
		return p.endOnOutcome(span, nil, r), nil
	}
	return p.withReceipt(ctx, span, env, pubOpts)
}

// PublishEnvelopeWithReceipt starts the publish of an envelope already
// built, as artemis.Publisher.PublishEnvelopeWithReceipt does; the send
// span ends when the outcome is known.
func (p *Publisher) PublishEnvelopeWithReceipt(ctx context.Context, env *artemis.Envelope, opts ...artemis.PublishOption) (*artemis.Receipt, error) {
	ctx, span := p.start(ctx)
	return p.withReceipt(ctx, span, env, opts)
}

func (p *Publisher) withReceipt(ctx context.Context, span trace.Span, env *artemis.Envelope, opts []artemis.PublishOption) (*artemis.Receipt, error) {
	r, err := p.p.PublishEnvelopeWithReceipt(ctx, env, p.inject(ctx, opts)...)
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

// envelope builds the envelope Publish sends: meta.queue is the queue, the
// trace_id the span's trace unless opts give one. It returns the
// PublishOptions among opts.
func (p *Publisher) envelope(sc trace.SpanContext, urn string, data any, opts []artemis.BuildOption) (*artemis.Envelope, []artemis.PublishOption, error) {
	envOpts := make([]artemis.EnvelopeOption, 0, 2+len(opts))
	envOpts = append(envOpts, artemis.EnvelopeQueue(p.queue))
	if sc.TraceID().IsValid() {
		envOpts = append(envOpts, artemis.EnvelopeTraceID(UUIDOf(sc.TraceID())))
	}
	var pubOpts []artemis.PublishOption
	for _, o := range opts {
		switch o := o.(type) {
		case artemis.EnvelopeOption:
			envOpts = append(envOpts, o) // after ours: the caller's trace id wins
		case artemis.PublishOption:
			pubOpts = append(pubOpts, o)
		}
	}
	env, err := artemis.NewEnvelope(urn, data, envOpts...)
	return env, pubOpts, err
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
