// The producer side: a publisher whose every publish runs in a send span
// whose context rides with the message as W3C trace context.

package otel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

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
		semconv.MessagingDestinationName(bounded(queue)),
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
	returned := false
	defer p.endIfAborted(span, env, &returned)
	id, err := p.p.Publish(ctx, send, p.inject(ctx, opts)...)
	returned = true
	p.end(span, env, err)
	return id, err
}

// errPublishAborted is what the span of a publish that panicked or exited
// its goroutine (runtime.Goexit) records.
var errPublishAborted = errors.New("babelqueue/otel: the publish panicked or exited its goroutine")

// endIfAborted, deferred, ends span with errPublishAborted when the
// publish did not return.
func (p *Publisher) endIfAborted(span trace.Span, env *artemis.Envelope, returned *bool) {
	if !*returned {
		p.end(span, env, errPublishAborted)
	}
}

// PublishWithReceipt starts the publish of m, as
// artemis.Publisher.PublishWithReceipt does, with the envelope Publish
// gives it. The send span ends when the broker's outcome is known (a
// goroutine waits for the receipt, which every publisher resolves), not
// when the call returns.
func (p *Publisher) PublishWithReceipt(ctx context.Context, m artemis.Outgoing, opts ...artemis.PublishOption) (*artemis.Receipt, error) {
	ctx, span := p.start(ctx)
	env, send := p.envelope(span.SpanContext(), m)
	returned := false
	defer p.endIfAborted(span, env, &returned)
	r, err := p.p.PublishWithReceipt(ctx, send, p.inject(ctx, opts)...)
	returned = true
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
			semconv.MessagingMessageID(bounded(env.Meta.ID)),
			semconv.MessagingMessageConversationID(bounded(env.TraceID)),
			attribute.String("babelqueue.urn", bounded(env.URN)),
		)
	}
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(publishErrorType(err)))
		recordError(span, err)
	}
	span.End()
}

// maxAttr bounds, in bytes, a span attribute, event attribute or status
// description copied from a message or an error: a crafted URN, queue or
// error text of megabytes must not make a span as big.
const maxAttr = 256

// bounded is s cut to maxAttr bytes at a rune boundary, invalid UTF-8
// replaced.
func bounded(s string) string {
	if len(s) > maxAttr {
		cut := maxAttr
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	if !utf8.ValidString(s) {
		s = bounded(strings.ToValidUTF8(s, "\uFFFD"))
	}
	return s
}

// recordError records err on span as RecordError does, its type and text
// bounded, and sets the error status.
func recordError(span trace.Span, err error) {
	span.SetStatus(codes.Error, "") // kept when err's Error method exits the goroutine
	msg := bounded(errorText(err))
	span.AddEvent(semconv.ExceptionEventName, trace.WithAttributes(
		semconv.ExceptionType(bounded(fmt.Sprintf("%T", err))),
		semconv.ExceptionMessage(msg),
	))
	span.SetStatus(codes.Error, msg)
}

// errorText is err.Error(), or a fixed text naming err's type when that
// panics (a typed nil pointer's method, say): a handler's error is user
// code, and its panic here would replace the error the library is given.
func errorText(err error) (text string) {
	defer func() {
		if recover() != nil {
			text = fmt.Sprintf("%T (its Error method panicked)", err)
		}
	}()
	return err.Error()
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
	return op + " " + bounded(queue)
}
