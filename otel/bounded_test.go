package otel

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/Azure/go-amqp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// exitingPublisher exits its caller's goroutine, as t.FailNow does.
type exitingPublisher struct{}

func (exitingPublisher) Publish(context.Context, artemis.Outgoing, ...artemis.PublishOption) (string, error) {
	runtime.Goexit()
	return "", nil
}

func (exitingPublisher) PublishWithReceipt(context.Context, artemis.Outgoing, ...artemis.PublishOption) (*artemis.Receipt, error) {
	runtime.Goexit()
	return nil, nil
}

// inGoroutine runs f in a goroutine of its own and waits for it to end.
func inGoroutine(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// A handler or a publish that exits its goroutine still ends its span, with
// an error status.
func TestSpansEndWhenTheCallExitsItsGoroutine(t *testing.T) {
	tel := newRecorded(t, Config{})
	cons, err := artemis.NewConsumer(tel.Handlers(artemis.Handlers{urnCreated: func(context.Context, *artemis.Envelope, *amqp.Message) error {
		runtime.Goexit()
		return nil
	}}), artemis.WithoutDeadLetter())
	if err != nil {
		t.Fatal(err)
	}
	env, err := artemis.NewEnvelope(urnCreated, nil, artemis.EnvelopeQueue("orders"))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := artemis.NewMessage(env)
	if err != nil {
		t.Fatal(err)
	}
	r := fakelink.NewReceiver(t, "orders")
	inGoroutine(func() { _ = cons.Handle(context.Background(), r, r.Track(msg)) })
	if s := tel.one(t, trace.SpanKindConsumer); s.Status().Code != codes.Error {
		t.Errorf("process span status %v, want Error", s.Status())
	}
	for _, publish := range []func(*Publisher){
		func(p *Publisher) { _, _ = p.Publish(context.Background(), artemis.Job(urnCreated, nil)) },
		func(p *Publisher) { _, _ = p.PublishWithReceipt(context.Background(), artemis.Job(urnCreated, nil)) },
	} {
		inGoroutine(func() { publish(tel.Publisher(exitingPublisher{}, "orders")) })
	}
	spans := tel.ended(trace.SpanKindProducer)
	if len(spans) != 2 {
		t.Fatalf("%d send spans ended, want 2", len(spans))
	}
	for _, s := range spans {
		if s.Status().Code != codes.Error {
			t.Errorf("send span status %v, want Error", s.Status())
		}
	}
}

// What a message brings (its URN, queue, an error's text) is cut to
// maxAttr bytes on a span, at a rune boundary.
func TestSpanAttributesFromAMessageAreBounded(t *testing.T) {
	tel := newRecorded(t, Config{})
	huge := strings.Repeat("é", 50_000)
	h := tel.Handler(func(context.Context, *artemis.Envelope, *amqp.Message) error { return errors.New(huge) })
	env := &artemis.Envelope{URN: "urn:" + huge, TraceID: huge}
	env.Meta.Queue = huge
	env.Meta.ID = huge
	_ = h(context.Background(), env, nil)
	_, _ = tel.Publisher(artemis.NewPublisher(&fakelink.Sender{}, "orders"), huge).Publish(context.Background(), &artemis.Envelope{URN: "urn:" + huge})
	for _, s := range tel.spans.Ended() {
		if len(s.Name()) > 2*maxAttr {
			t.Errorf("span name of %d bytes", len(s.Name()))
		}
		if d := s.Status().Description; len(d) > maxAttr || !utf8.ValidString(d) {
			t.Errorf("status description of %d bytes", len(d))
		}
		for _, a := range s.Attributes() {
			if v := a.Value.String(); len(v) > maxAttr || !utf8.ValidString(v) {
				t.Errorf("attribute %s of %d bytes", a.Key, len(v))
			}
		}
		for _, ev := range s.Events() {
			for _, a := range ev.Attributes {
				if v := a.Value.String(); len(v) > maxAttr || !utf8.ValidString(v) {
					t.Errorf("event %s attribute %s of %d bytes", ev.Name, a.Key, len(v))
				}
			}
		}
	}
}
