// Command otel traces one message through Artemis with the OpenTelemetry
// SDK: a producer span whose context travels with the message as a W3C
// traceparent header, and a consumer span, in the handler, that is its
// child.
//
//	cd examples && go run ./otel [-queue name]
//
// The producer injects the span context with the W3C TraceContext
// propagator into an artemis.HeaderCarrier and publishes with
// artemis.WithHeaders(carrier): the header rides as an AMQP application
// property. The handler extracts it from artemis.HeadersFromContext(ctx).
// The library itself does not import OpenTelemetry: HeaderCarrier has the
// method set of propagation.TextMapCarrier.
//
// The spans follow OpenTelemetry's messaging semantic conventions
// (semconv v1.43.0): "send <queue>" of kind producer, "process <queue>" of
// kind consumer (a push-based handler, no separate receive span), with
// messaging.system "activemq", messaging.operation.name and .type,
// messaging.destination.name (the queue), messaging.message.id (meta.id),
// messaging.message.conversation_id (the envelope's trace_id),
// server.address and server.port. The process span is the child of the
// send span and also links to it, the message's creation context.
//
// Each span is printed as it ends. The broker is ARTEMIS_URL (default
// amqp://babel:babel@127.0.0.1:5672); without -queue a fresh queue name is
// used.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// URNShipped is the URN of the traced message.
const URNShipped = "urn:babel:orders:shipped"

// ScopeName names the instrumentation scope of the example's spans.
const ScopeName = "github.com/babelqueue/babelqueue-go-artemis/examples/otel"

type config struct {
	broker.Config
	// TracerProvider records the spans; nil means an SDK provider that
	// prints each span to the output as it ends.
	TracerProvider trace.TracerProvider
}

func main() {
	var cfg config
	broker.Main("otel", &cfg.Config, broker.Flags{Timeout: 30 * time.Second},
		func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
}

// handled is what the handler saw.
type handled struct {
	traceparent string
	span        trace.SpanContext
	parent      trace.SpanContext
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	// A log.Logger serialises its writes: spans end on the consumer's
	// goroutine too.
	out := log.New(w, "", 0)

	tp := cfg.TracerProvider
	if tp == nil {
		sdk := sdktrace.NewTracerProvider(sdktrace.WithSyncer(&printExporter{out: out}))
		defer sdk.Shutdown(context.WithoutCancel(ctx))
		tp = sdk
	}
	spans := messaging{
		tracer: tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		queue:  cfg.Queue,
		common: append([]attribute.KeyValue{semconv.MessagingSystemActiveMQ, semconv.MessagingDestinationName(cfg.Queue)},
			serverAttributes(cfg.URL)...),
	}
	prop := propagation.TraceContext{}
	out.Printf("otel example: queue %s, broker %s\n", cfg.Queue, broker.Redact(cfg.URL))

	client, pub, err := broker.Connect(ctx, cfg.URL, cfg.Queue)
	if err != nil {
		return err
	}
	defer client.Close()

	// The consumer. Its context carries no span: the parent of the process
	// span can only come from the message.
	got := make(chan handled, 1)
	handle := func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		headers := artemis.HeadersFromContext(ctx)
		parent := prop.Extract(ctx, headers)
		ctx, span := spans.start(parent, "process", trace.SpanKindConsumer, semconv.MessagingOperationTypeProcess, env,
			trace.WithLinks(trace.LinkFromContext(parent)))
		err := ship(ctx, env) // the business work, inside the span
		end(span, err)
		select {
		case got <- handled{headers.Get("traceparent"), span.SpanContext(), trace.SpanContextFromContext(parent)}:
		case <-ctx.Done():
		}
		return err
	}
	cons, err := broker.Consume(ctx, client, cfg.Queue, artemis.Handlers{URNShipped: handle})
	if err != nil {
		return err
	}

	// The producer: the send span is the message's creation context.
	env, err := artemis.NewEnvelope(URNShipped, map[string]any{"order_id": 1042, "carrier": "dhl"}, artemis.EnvelopeQueue(cfg.Queue))
	if err != nil {
		return err
	}
	sctx, span := spans.start(ctx, "send", trace.SpanKindProducer, semconv.MessagingOperationTypeSend, env)
	carrier := artemis.HeaderCarrier{}
	prop.Inject(sctx, carrier)
	_, err = pub.PublishEnvelope(sctx, env, artemis.WithHeaders(carrier))
	end(span, err)
	if err != nil {
		return err
	}
	producer := span.SpanContext()
	out.Printf("published %s (meta.id %s) with traceparent %s\n", URNShipped, env.Meta.ID, carrier.Get("traceparent"))

	var h handled
	select {
	case h = <-got:
	case err := <-cons.Done():
		return broker.Early(err)
	case <-ctx.Done():
		_ = cons.Stop()
		return fmt.Errorf("gave up waiting for the message: %w", ctx.Err())
	}
	if err := cons.Stop(); err != nil {
		return err
	}
	out.Printf("the handler got traceparent %s\n", h.traceparent)
	if !h.parent.IsRemote() || h.parent.SpanID() != producer.SpanID() || h.span.TraceID() != producer.TraceID() {
		return errors.New("the process span is not a child of the send span: the trace context was lost on the way")
	}
	out.Printf("the process span %s is a child of the send span %s, in trace %s\n",
		h.span.SpanID(), producer.SpanID(), producer.TraceID())
	return nil
}

// messaging starts the spans of the messaging operations on one queue,
// with the semantic-convention attributes both kinds carry.
type messaging struct {
	tracer trace.Tracer
	queue  string
	common []attribute.KeyValue // messaging.system, the destination, the server
}

// start starts the span "<op> <queue>" of kind on env: op is the
// operation's name and opType its type (semconv.MessagingOperationType*).
func (m messaging) start(ctx context.Context, op string, kind trace.SpanKind, opType attribute.KeyValue,
	env *artemis.Envelope, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	opts = append(opts, trace.WithSpanKind(kind), trace.WithAttributes(m.common...), trace.WithAttributes(
		semconv.MessagingOperationName(op),
		opType,
		semconv.MessagingMessageID(env.Meta.ID),
		semconv.MessagingMessageConversationID(env.TraceID),
	))
	return m.tracer.Start(ctx, op+" "+m.queue, opts...)
}

// end ends span, recording err as its error status first when it is set.
func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// ship stands for the handler's work; a real one would start child spans
// from ctx.
func ship(context.Context, *artemis.Envelope) error { return nil }

// serverAttributes are server.address and server.port of the broker URL.
func serverAttributes(raw string) []attribute.KeyValue {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	attrs := []attribute.KeyValue{semconv.ServerAddress(u.Hostname())}
	port := u.Port()
	if port == "" {
		port = "5672"
		if u.Scheme == "amqps" {
			port = "5671"
		}
	}
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(n))
	}
	return attrs
}

// printExporter writes each span on two lines: what it is, then its
// attributes. A real program exports to a collector (OTLP) instead.
type printExporter struct{ out *log.Logger }

func (e *printExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	for _, s := range spans {
		parent := "-"
		if s.Parent().IsValid() {
			parent = s.Parent().SpanID().String()
			if s.Parent().IsRemote() {
				parent += " (remote)"
			}
		}
		attrs := make([]string, 0, len(s.Attributes()))
		for _, a := range s.Attributes() {
			attrs = append(attrs, string(a.Key)+"="+a.Value.Emit())
		}
		e.out.Printf("span %q  kind %s  trace %s  span %s  parent %s\n    %s\n",
			s.Name(), s.SpanKind(), s.SpanContext().TraceID(), s.SpanContext().SpanID(), parent, strings.Join(attrs, " "))
	}
	return nil
}

func (e *printExporter) Shutdown(context.Context) error { return nil }
