// The consumer side: a handler middleware that runs each handler in a
// process span, the child of the message's creation context.

package otel

import (
	"context"
	"fmt"

	"github.com/Azure/go-amqp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// Handlers returns hs with every handler wrapped by Handler: give it to
// artemis.NewConsumer in place of hs. hs itself is not changed.
func (t *Telemetry) Handlers(hs artemis.Handlers) artemis.Handlers {
	out := make(artemis.Handlers, len(hs))
	for urn, h := range hs {
		out[urn] = t.Handler(h)
	}
	return out
}

// Handler wraps h so that it runs in a span "process <queue>" of kind
// consumer (queue: the envelope's meta.queue). The span's parent is the
// trace context extracted from the message's headers (W3C traceparent),
// to which it also links; a message without a valid traceparent is
// handled under the remote parent derived from its trace_id (see
// TraceIDOf), and then has no link. The handler's ctx carries the span, so
// what it publishes through a Publisher is a child of it. An error or a
// panic of h is recorded on the span (a panic goes on up to the Consumer,
// which recovers it); h's result is returned as it is. A nil h gives nil,
// which artemis.NewConsumer refuses (ErrInvalidConfig) as it refuses any
// nil handler, rather than a handler that panics on every message.
func (t *Telemetry) Handler(h artemis.HandlerFunc) artemis.HandlerFunc {
	if h == nil {
		return nil
	}
	return func(ctx context.Context, env *artemis.Envelope, msg *amqp.Message) (err error) {
		ctx, span := t.startProcess(ctx, env, msg)
		returned := false
		defer func() {
			if returned {
				endProcess(span, err)
				return
			}
			if p := recover(); p != nil {
				endProcess(span, fmt.Errorf("handler panicked: %v", p))
				panic(p)
			}
			endProcess(span, artemis.ErrHandlerExited) // runtime.Goexit: the goroutine goes on exiting
		}()
		err = h(ctx, env, msg)
		returned = true
		return err
	}
}

// startProcess starts the process span of env under its creation context.
func (t *Telemetry) startProcess(ctx context.Context, env *artemis.Envelope, msg *amqp.Message) (context.Context, trace.Span) {
	var headers artemis.HeaderCarrier
	if msg != nil {
		headers = artemis.Headers(msg)
	} else {
		headers = artemis.HeadersFromContext(ctx)
	}
	opts := make([]trace.SpanStartOption, 0, 4)
	opts = append(opts, trace.WithSpanKind(trace.SpanKindConsumer))
	// The creation context replaces whatever span ctx had: Listen's context
	// lives as long as the consumer, not as this message.
	parent := t.prop.Extract(context.Background(), headers)
	switch sc := trace.SpanContextFromContext(parent); {
	case sc.IsValid():
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	case env != nil && env.TraceID != "":
		ctx = derivedParent(ctx, env.TraceID)
	default:
		opts = append(opts, trace.WithNewRoot())
	}
	// Baggage the producer sent comes along too.
	if b := baggage.FromContext(parent); b.Len() > 0 {
		ctx = baggage.ContextWithBaggage(ctx, b)
	}

	queue := ""
	attrs := make([]attribute.KeyValue, 0, 12+len(t.server))
	attrs = append(attrs,
		semconv.MessagingSystemActiveMQ,
		semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess,
	)
	if env != nil {
		queue = env.Meta.Queue
		attrs = append(attrs,
			semconv.MessagingMessageID(bounded(env.Meta.ID)),
			semconv.MessagingMessageConversationID(bounded(env.TraceID)),
			attribute.String("babelqueue.urn", bounded(env.URN)),
			attribute.Int("babelqueue.attempts", env.Attempts),
		)
	}
	if queue != "" {
		attrs = append(attrs, semconv.MessagingDestinationName(bounded(queue)))
	}
	if msg != nil {
		attrs = append(attrs, semconv.MessagingMessageBodySize(bodySize(msg)))
	}
	attrs = append(attrs, t.server...)
	opts = append(opts, trace.WithAttributes(attrs...))
	return t.tracer.Start(ctx, spanName("process", queue), opts...)
}

// bodySize is the size of the message's body: its data sections, or its
// string or binary value (the projection's body is a string value).
func bodySize(msg *amqp.Message) int {
	n := 0
	for _, d := range msg.Data {
		n += len(d)
	}
	switch v := msg.Value.(type) {
	case string:
		n += len(v)
	case []byte:
		n += len(v)
	}
	return n
}

// endProcess records err on the span, and ends it.
func endProcess(span trace.Span, err error) {
	defer span.End() // also when err's Error method exits the goroutine
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(artemis.KindHandlerFailed.String()))
		recordError(span, err)
	}
}
