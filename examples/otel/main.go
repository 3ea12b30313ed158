// Command otel traces one message through Artemis with the library's otel
// module: a producer span whose context travels with the message as a W3C
// traceparent header, and a consumer span, around the handler, that is its
// child and links to it.
//
//	cd examples && go run ./otel [-queue name]
//
// Two lines do it: tel.Publisher wraps the Client's publisher, and
// tel.Handlers wraps the handlers (see the module's documentation for the
// spans' names and attributes, semconv v1.43.0). Each span is printed as
// it ends. The broker is ARTEMIS_URL (default
// amqp://babel:babel@127.0.0.1:5672); without -queue a fresh queue name is
// used.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	bqotel "github.com/babelqueue/babelqueue-go-artemis/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// URNShipped is the URN of the traced message.
const URNShipped = "urn:babel:orders:shipped"

type config struct {
	broker.Config
	// TracerProvider records the spans; nil: print each span as it ends.
	TracerProvider trace.TracerProvider
}

func main() {
	var cfg config
	broker.Main("otel", &cfg.Config, broker.Flags{Timeout: 30 * time.Second},
		func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	out := log.New(w, "", 0) // spans end on the consumer's goroutine too
	tp := cfg.TracerProvider
	if tp == nil {
		sdk := sdktrace.NewTracerProvider(sdktrace.WithSyncer(printExporter{out}))
		defer sdk.Shutdown(context.WithoutCancel(ctx))
		tp = sdk
	}
	tel, err := bqotel.New(bqotel.Config{TracerProvider: tp, ServerURL: cfg.URL})
	if err != nil {
		return err
	}
	out.Printf("otel example: queue %s, broker %s\n", cfg.Queue, broker.Redact(cfg.URL))
	client, cp, err := broker.Connect(ctx, cfg.URL, cfg.Queue)
	if err != nil {
		return err
	}
	defer client.Close(context.Background())

	got := make(chan string, 1)
	ship := func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		// ctx carries the process span: the business work goes under it.
		select {
		case got <- artemis.HeadersFromContext(ctx).Get("traceparent"):
		default:
		}
		return nil
	}
	cons, err := broker.Consume(ctx, client, cfg.Queue, tel.Handlers(artemis.Handlers{URNShipped: ship}))
	if err != nil {
		return err
	}
	id, err := tel.Publisher(cp, cfg.Queue).Publish(ctx, artemis.Job(URNShipped, map[string]any{"order_id": 1042, "carrier": "dhl"}))
	if err != nil {
		return err
	}
	out.Printf("published %s (meta.id %s)\n", URNShipped, id)
	select {
	case tp := <-got:
		out.Printf("the handler got traceparent %s\n", tp)
	case err := <-cons.Done():
		return broker.Early(err)
	case <-ctx.Done():
		_ = cons.Stop()
		return fmt.Errorf("gave up waiting for the message: %w", ctx.Err())
	}
	return cons.Stop()
}

// printExporter writes each span on two lines: what it is, then its
// attributes. A real program exports to a collector (OTLP) instead.
type printExporter struct{ out *log.Logger }

func (e printExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	for _, s := range spans {
		attrs := make([]string, 0, len(s.Attributes()))
		for _, a := range s.Attributes() {
			attrs = append(attrs, string(a.Key)+"="+a.Value.Emit())
		}
		e.out.Printf("span %q  kind %s  trace %s  span %s  parent %s  links %d\n    %s\n", s.Name(), s.SpanKind(),
			s.SpanContext().TraceID(), s.SpanContext().SpanID(), s.Parent().SpanID(), len(s.Links()), strings.Join(attrs, " "))
	}
	return nil
}

func (printExporter) Shutdown(context.Context) error { return nil }
