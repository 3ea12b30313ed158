package otel

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/Azure/go-amqp"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// countingObserver counts what an artemis.Observer hears.
type countingObserver struct{ published, settled atomic.Int64 }

func (o *countingObserver) Published(artemis.PublishEvent) { o.published.Add(1) }
func (o *countingObserver) Settled(artemis.SettleEvent)    { o.settled.Add(1) }

// handled is what a wrapped handler saw.
type handled struct {
	span    trace.SpanContext
	baggage baggage.Baggage
	env     *artemis.Envelope
}

// handleOne runs msg through a Consumer whose handler for urnCreated is
// wrapped by tel and returns err, and returns what the handler saw.
func handleOne(t *testing.T, tel *recorded, msg *amqp.Message, err error, opts ...artemis.ConsumerOption) (handled, *fakelink.Receiver) {
	t.Helper()
	var got handled
	h := func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		got = handled{trace.SpanContextFromContext(ctx), baggage.FromContext(ctx), env}
		return err
	}
	cons, cerr := artemis.NewConsumer(tel.Handlers(artemis.Handlers{urnCreated: h}),
		append([]artemis.ConsumerOption{artemis.WithObserver(tel), artemis.WithDeadLetterSender(&fakelink.Sender{}),
			artemis.WithQueue("orders")}, opts...)...)
	if cerr != nil {
		t.Fatalf("NewConsumer: %v", cerr)
	}
	r := fakelink.NewReceiver(t, "orders")
	if herr := cons.Handle(context.Background(), r, r.Track(msg)); (herr != nil) != (err != nil) {
		t.Fatalf("Handle: %v, want the handler's %v", herr, err)
	}
	return got, r
}

// published publishes one message through tel's Publisher under ctx and
// returns it.
func published(ctx context.Context, t *testing.T, tel *recorded) *amqp.Message {
	t.Helper()
	s := &fakelink.Sender{}
	if _, err := tel.Publisher(artemis.NewPublisher(s, "orders"), "orders").Publish(ctx, artemis.Job(urnCreated, map[string]int{"order_id": 1})); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	return s.Sent()[0]
}

func TestProcessSpanIsTheChildOfTheSendSpanAndLinksToIt(t *testing.T) {
	tel := newRecorded(t, Config{})
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	msg := published(baggage.ContextWithBaggage(context.Background(), bag), t, tel)
	send := tel.one(t, trace.SpanKindProducer)

	got, r := handleOne(t, tel, msg, nil)
	process := tel.one(t, trace.SpanKindConsumer)
	if process.Name() != "process orders" {
		t.Errorf("span name %q, want %q", process.Name(), "process orders")
	}
	sc := send.SpanContext()
	if process.Parent().SpanID() != sc.SpanID() || !process.Parent().IsRemote() {
		t.Errorf("process parent %s (remote %v), want the send span %s, remote", process.Parent().SpanID(), process.Parent().IsRemote(), sc.SpanID())
	}
	if process.SpanContext().TraceID() != sc.TraceID() {
		t.Errorf("process trace %s, want %s", process.SpanContext().TraceID(), sc.TraceID())
	}
	if links := process.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != sc.SpanID() {
		t.Errorf("links %+v, want one to the send span", links)
	}
	if got.span.SpanID() != process.SpanContext().SpanID() {
		t.Errorf("the handler's ctx carries span %s, want the process span %s", got.span.SpanID(), process.SpanContext().SpanID())
	}
	if got.baggage.Member("tenant").Value() != "acme" {
		t.Errorf("baggage %q, want the producer's tenant=acme", got.baggage.String())
	}
	a := attrs(process)
	for k, v := range map[string]string{
		"messaging.system": "activemq", "messaging.operation.name": "process", "messaging.operation.type": "process",
		"messaging.destination.name": "orders", "messaging.message.id": got.env.Meta.ID,
		"messaging.message.conversation_id": got.env.TraceID, "babelqueue.urn": urnCreated, "babelqueue.attempts": "0",
	} {
		if a[k] != v {
			t.Errorf("%s = %q, want %q", k, a[k], v)
		}
	}
	if a["messaging.message.body.size"] != strconv.Itoa(len(msg.Value.(string))) {
		t.Errorf("body size %q, want %d", a["messaging.message.body.size"], len(msg.GetData()))
	}
	if d, _ := r.Disposition(msg); d != fakelink.Accepted {
		t.Errorf("disposition %v, want accepted", d)
	}
}

func TestWithoutTraceparentTheTraceIDGivesTheTrace(t *testing.T) {
	for _, tc := range []struct {
		name, traceparent string
	}{
		{"no header", ""},
		{"a malformed header", "00-zz-yy-01"},
		{"an all-zero trace", "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel := newRecorded(t, Config{})
			env, err := artemis.NewEnvelope(urnCreated, nil, artemis.EnvelopeQueue("orders"),
				artemis.EnvelopeTraceID("7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"))
			if err != nil {
				t.Fatal(err)
			}
			var opts []artemis.PublishOption
			if tc.traceparent != "" {
				opts = append(opts, artemis.WithHeaders(map[string]string{"traceparent": tc.traceparent}))
			}
			msg, err := artemis.NewMessage(env, opts...)
			if err != nil {
				t.Fatal(err)
			}
			handleOne(t, tel, msg, nil)
			process := tel.one(t, trace.SpanKindConsumer)
			if got := process.SpanContext().TraceID().String(); got != "7b3f9c2ae41d4f889b2a1c0d5e6f7a8b" {
				t.Errorf("trace %s, want the trace_id's 7b3f9c2ae41d4f889b2a1c0d5e6f7a8b", got)
			}
			if p := process.Parent(); p.SpanID().String() != "980c512d6f4a8fba" || !p.IsRemote() {
				t.Errorf("parent %s (remote %v), want the derived 980c512d6f4a8fba", p.SpanID(), p.IsRemote())
			}
			if len(process.Links()) != 0 {
				t.Errorf("links %+v, want none (there is no creation context)", process.Links())
			}
		})
	}
}

func TestHandlerErrorAndPanicAreTheSpansError(t *testing.T) {
	tel := newRecorded(t, Config{})
	_, r := handleOne(t, tel, published(context.Background(), t, tel), errors.New("payment gateway timeout"), artemis.WithMaxTries(3))
	process := tel.one(t, trace.SpanKindConsumer)
	if process.Status().Code != codes.Error || attrs(process)["error.type"] != "handler_failed" {
		t.Errorf("status %v error.type %q", process.Status(), attrs(process)["error.type"])
	}
	for _, d := range r.Dispositions() {
		if d != fakelink.Failed {
			t.Errorf("disposition %v, want modified (a retry)", d)
		}
	}

	tel = newRecorded(t, Config{})
	msg := published(context.Background(), t, tel)
	cons, err := artemis.NewConsumer(tel.Handlers(artemis.Handlers{urnCreated: func(context.Context, *artemis.Envelope, *amqp.Message) error {
		panic("nil order")
	}}), artemis.WithDeadLetterSender(&fakelink.Sender{}), artemis.WithMaxTries(1), artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
	if err != nil {
		t.Fatal(err)
	}
	r = fakelink.NewReceiver(t, "orders")
	if err := cons.Handle(context.Background(), r, r.Track(msg)); !errors.Is(err, artemis.ErrHandlerFailed) {
		t.Fatalf("Handle: %v, want ErrHandlerFailed", err)
	}
	process = tel.one(t, trace.SpanKindConsumer)
	if process.Status().Code != codes.Error || !strings.Contains(process.Status().Description, "nil order") {
		t.Errorf("status %v, want the panic", process.Status())
	}
	if d, _ := r.Disposition(msg); d != fakelink.Accepted {
		t.Errorf("disposition %v, want accepted after the dead-letter copy", d)
	}
}

func TestHandlersLeavesTheGivenMapAlone(t *testing.T) {
	tel := newRecorded(t, Config{})
	hs := artemis.Handlers{urnCreated: func(context.Context, *artemis.Envelope, *amqp.Message) error { return nil }}
	wrapped := tel.Handlers(hs)
	if err := hs[urnCreated](context.Background(), &artemis.Envelope{URN: urnCreated}, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(tel.spans.Ended()); n != 0 {
		t.Fatalf("the given handler started %d spans: it was replaced in place", n)
	}
	if err := wrapped[urnCreated](context.Background(), &artemis.Envelope{URN: urnCreated, TraceID: "t"}, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(tel.spans.Ended()); n != 1 {
		t.Fatalf("the wrapped handler ended %d spans, want 1", n)
	}
}

// A nil handler stays nil once wrapped, so NewConsumer still refuses it
// with ErrInvalidConfig: wrapped into a function, it would be accepted and
// every message of its URN would panic, fail and end in the dead-letter
// queue.
func TestANilHandlerIsStillRefusedByNewConsumer(t *testing.T) {
	tel := newRecorded(t, Config{})
	_, err := artemis.NewConsumer(tel.Handlers(artemis.Handlers{urnCreated: nil}))
	t.Logf("NewConsumer(tel.Handlers({%s: nil})): %v", urnCreated, err)
	if !errors.Is(err, artemis.ErrInvalidConfig) {
		t.Fatalf("NewConsumer of a wrapped nil handler: %v, want ErrInvalidConfig", err)
	}
	if tel.Handler(nil) != nil {
		t.Error("Handler(nil) is not nil")
	}
}

// nilPtrErr is a handler's error type whose Error method dereferences its
// receiver: a typed nil pointer of it panics when read.
type nilPtrErr struct{ text string }

func (e *nilPtrErr) Error() string { return e.text }

// exitingErr is a handler's error whose Error method exits the goroutine.
type exitingErr struct{}

func (exitingErr) Error() string { runtime.Goexit(); return "" }

// A handler's error whose Error method panics (a typed nil pointer) or
// exits the goroutine still ends the process span, once; a panicking one
// reaches the Consumer as the handler's error (not as a handler panic),
// and the delivery is settled once either way.
func TestHandlerErrorWhoseErrorMethodBreaksEndsTheSpan(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"Error panics", (*nilPtrErr)(nil)},
		{"Error exits the goroutine", exitingErr{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel := newRecorded(t, Config{})
			msg := published(context.Background(), t, tel)
			cons, err := artemis.NewConsumer(tel.Handlers(artemis.Handlers{urnCreated: func(context.Context, *artemis.Envelope, *amqp.Message) error {
				return tc.err
			}}), artemis.WithDeadLetterSender(&fakelink.Sender{}), artemis.WithMaxTries(3),
				artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
			if err != nil {
				t.Fatal(err)
			}
			r := fakelink.NewReceiver(t, "orders")
			done := make(chan error, 1)
			go func() { // an Error method that exits ends this goroutine
				herr := errors.New("Handle exited its goroutine")
				defer func() { done <- herr }()
				herr = cons.Handle(context.Background(), r, r.Track(msg))
			}()
			herr := <-done
			if ended := tel.ended(trace.SpanKindConsumer); len(ended) != 1 {
				t.Fatalf("%d consumer spans ended, want 1", len(ended))
			}
			if process := tel.one(t, trace.SpanKindConsumer); process.Status().Code != codes.Error {
				t.Errorf("status %v, want an error", process.Status())
			}
			if d, _ := r.Disposition(msg); d != fakelink.Failed {
				t.Errorf("disposition %v, want modified (a retry)", d)
			}
			if tc.name == "Error panics" {
				var target *nilPtrErr
				if !errors.As(herr, &target) || strings.Contains(fmt.Sprint(herr), "handler panicked") {
					t.Errorf("Handle: %v, want the handler's *nilPtrErr, not a panic", herr)
				}
			}
		})
	}
}
