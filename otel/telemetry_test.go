package otel

import (
	"context"
	"strings"
	"testing"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

func TestServerURLIsChecked(t *testing.T) {
	for _, u := range []string{"::not a url", "amqp://user:hunter2@:5672", "amqp://h:notaport"} {
		_, err := New(Config{ServerURL: u})
		if err == nil {
			t.Errorf("New(ServerURL %q) accepted it", u)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// The zero Config uses the global providers and still propagates W3C
// trace context: the global propagator is a no-op until a program sets one.
func TestZeroConfigUsesTheGlobalsAndW3C(t *testing.T) {
	rec := newRecorded(t, Config{})
	prev := gotel.GetTracerProvider()
	gotel.SetTracerProvider(rec.tp)
	defer gotel.SetTracerProvider(prev)
	tel, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &fakelink.Sender{}
	if _, err := tel.Publisher(artemis.NewPublisher(s, "orders"), "orders").Publish(context.Background(), artemis.Job(urnCreated, nil)); err != nil {
		t.Fatal(err)
	}
	send := rec.one(t, trace.SpanKindProducer)
	if got := s.Sent()[0].ApplicationProperties["traceparent"]; got != traceparentOf(send.SpanContext()) {
		t.Errorf("traceparent %v, want the global provider's send span", got)
	}
}
