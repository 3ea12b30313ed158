package otel_test

import (
	"context"
	"log"

	"github.com/Azure/go-amqp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	bqotel "github.com/babelqueue/babelqueue-go-artemis/otel"
)

// One Telemetry, one line at each place: the publisher's Observer, the
// wrapped publisher, the wrapped handlers and the Consumer's Observer.
func Example() {
	if err := run(context.Background(), "amqp://babel:babel@127.0.0.1:5672"); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, url string) error {
	tp := sdktrace.NewTracerProvider() // with an OTLP exporter in a real program
	mp := sdkmetric.NewMeterProvider() // with a periodic reader in a real program
	tel, err := bqotel.New(bqotel.Config{TracerProvider: tp, MeterProvider: mp, ServerURL: url})
	if err != nil {
		return err
	}
	client, err := artemis.Dial(ctx, []string{url}, nil)
	if err != nil {
		return err
	}
	defer func() { _ = client.Close(ctx) }()
	cp, err := client.Publisher(ctx, "orders", artemis.WithObserver(tel))
	if err != nil {
		return err
	}
	pub := tel.Publisher(cp, "orders")
	if _, err := pub.Publish(ctx, artemis.Job("urn:babel:orders:created", map[string]int{"order_id": 1042})); err != nil {
		return err
	}

	handlers := artemis.Handlers{"urn:babel:orders:created": func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		// ctx carries the process span: what is published here is its child.
		return nil
	}}
	cons, err := artemis.NewConsumer(tel.Handlers(handlers), artemis.WithObserver(tel))
	if err != nil {
		return err
	}
	return client.Consume(ctx, "orders", cons)
}
