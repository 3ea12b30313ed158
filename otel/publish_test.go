package otel

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

const urnCreated = "urn:babel:orders:created"

// traceparentOf is the W3C traceparent of a sampled span context.
func traceparentOf(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

func TestPublishStartsASendSpanAndInjectsItsContext(t *testing.T) {
	tel := newRecorded(t, Config{ServerURL: "amqp://babel:secret@127.0.0.1:5673"})
	s := &fakelink.Sender{}
	pub := tel.Publisher(artemis.NewPublisher(s, "orders"), "orders")

	// A caller's span: the send span is its child.
	ctx, outer := tel.tracer.Start(context.Background(), "checkout")
	id, err := pub.Publish(ctx, artemis.Job(urnCreated, map[string]any{"order_id": 1042}))
	outer.End()
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}

	send := tel.one(t, trace.SpanKindProducer)
	if send.Name() != "send orders" {
		t.Errorf("span name %q, want %q", send.Name(), "send orders")
	}
	if send.Parent().SpanID() != outer.SpanContext().SpanID() {
		t.Errorf("send span's parent %s, want the caller's span %s", send.Parent().SpanID(), outer.SpanContext().SpanID())
	}
	sent := s.Sent()
	if len(sent) != 1 {
		t.Fatalf("%d messages sent, want 1", len(sent))
	}
	msg := sent[0]
	if got, want := msg.ApplicationProperties["traceparent"], traceparentOf(send.SpanContext()); got != want {
		t.Errorf("traceparent %v, want %s (the send span)", got, want)
	}
	// The trace_id is the span's trace, in UUID form.
	env := decode(t, msg)
	if env.TraceID != UUIDOf(send.SpanContext().TraceID()) {
		t.Errorf("trace_id %s, want the span's trace %s", env.TraceID, UUIDOf(send.SpanContext().TraceID()))
	}
	if env.Meta.Queue != "orders" || env.Meta.ID != id {
		t.Errorf("meta.queue %q meta.id %q, want orders and %s", env.Meta.Queue, env.Meta.ID, id)
	}
	a := attrs(send)
	for k, v := range map[string]string{
		"messaging.system": "activemq", "messaging.operation.name": "send", "messaging.operation.type": "send",
		"messaging.destination.name": "orders", "messaging.message.id": id,
		"messaging.message.conversation_id": env.TraceID, "babelqueue.urn": urnCreated,
		"server.address": "127.0.0.1", "server.port": "5673",
	} {
		if a[k] != v {
			t.Errorf("%s = %q, want %q", k, a[k], v)
		}
	}
	if send.Status().Code != codes.Unset {
		t.Errorf("status %v, want unset", send.Status())
	}
	for k, v := range a {
		if strings.Contains(v, "secret") {
			t.Errorf("attribute %s carries the URL's password", k)
		}
	}
}

func TestPublishKeepsAGivenTraceIDAndReplacesAForwardedTraceparent(t *testing.T) {
	tel := newRecorded(t, Config{})
	s := &fakelink.Sender{}
	pub := tel.Publisher(artemis.NewPublisher(s, "orders"), "orders")
	const conversation = "11111111-2222-4333-8444-555555555555"
	forwarded := artemis.HeaderCarrier{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "acme"}

	_, err := pub.Publish(context.Background(), artemis.Job(urnCreated, nil, artemis.EnvelopeTraceID(conversation)), artemis.WithHeaders(forwarded), artemis.WithPriority(7))
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	send := tel.one(t, trace.SpanKindProducer)
	msg := s.Sent()[0]
	if env := decode(t, msg); env.TraceID != conversation {
		t.Errorf("trace_id %s, want the given %s", env.TraceID, conversation)
	}
	if got := msg.ApplicationProperties["traceparent"]; got != traceparentOf(send.SpanContext()) {
		t.Errorf("traceparent %v, want the send span's, not the forwarded one", got)
	}
	if msg.ApplicationProperties["tenant"] != "acme" || msg.Header.Priority != 7 {
		t.Errorf("the caller's options were lost: tenant %v priority %d", msg.ApplicationProperties["tenant"], msg.Header.Priority)
	}
	if attrs(send)["messaging.message.conversation_id"] != conversation {
		t.Errorf("conversation id %q, want %s", attrs(send)["messaging.message.conversation_id"], conversation)
	}
}

func TestPublishOfAnEnvelopeKeepsItsTraceID(t *testing.T) {
	tel := newRecorded(t, Config{})
	s := &fakelink.Sender{}
	pub := tel.Publisher(artemis.NewPublisher(s, "orders"), "orders")
	env, err := artemis.NewEnvelope(urnCreated, map[string]int{"order_id": 7}, artemis.EnvelopeQueue("orders"), artemis.EnvelopeTraceID("conv-7"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(context.Background(), env); err != nil {
		t.Fatalf("Publish envelope: %v", err)
	}
	send := tel.one(t, trace.SpanKindProducer)
	msg := s.Sent()[0]
	if decode(t, msg).TraceID != "conv-7" || attrs(send)["messaging.message.conversation_id"] != "conv-7" {
		t.Errorf("trace_id %q conversation %q, want conv-7", decode(t, msg).TraceID, attrs(send)["messaging.message.conversation_id"])
	}
	if msg.ApplicationProperties["traceparent"] != traceparentOf(send.SpanContext()) {
		t.Errorf("traceparent %v", msg.ApplicationProperties["traceparent"])
	}
}

func TestPublishFailureIsTheSpansError(t *testing.T) {
	tel := newRecorded(t, Config{})
	s := &fakelink.Sender{Outcome: fakelink.Reject}
	pub := tel.Publisher(artemis.NewPublisher(s, "orders"), "orders")
	_, err := pub.Publish(context.Background(), artemis.Job(urnCreated, nil))
	if !errors.Is(err, artemis.ErrNotAccepted) {
		t.Fatalf("Publish: %v, want ErrNotAccepted", err)
	}
	send := tel.one(t, trace.SpanKindProducer)
	if send.Status().Code != codes.Error || attrs(send)["error.type"] != "not_accepted" {
		t.Errorf("status %v error.type %q, want error and not_accepted", send.Status(), attrs(send)["error.type"])
	}
	if len(send.Events()) != 1 || send.Events()[0].Name != "exception" {
		t.Errorf("events %v, want the recorded error", send.Events())
	}
}

func TestPublishOfAnInvalidEnvelopeIsRefusedAsTheLibraryRefusesIt(t *testing.T) {
	tel := newRecorded(t, Config{})
	s := &fakelink.Sender{}
	obs := &countingObserver{}
	pub := tel.Publisher(artemis.NewPublisher(s, "orders", artemis.WithObserver(obs)), "orders")
	_, err := pub.Publish(context.Background(), artemis.Job("  ", nil))
	if !errors.Is(err, artemis.ErrInvalidEnvelope) {
		t.Fatalf("Publish with a blank URN: %v, want ErrInvalidEnvelope", err)
	}
	if len(s.Sent()) != 0 {
		t.Fatalf("%d messages sent, want none", len(s.Sent()))
	}
	if obs.published.Load() != 1 {
		t.Errorf("the publisher's Observer heard %d publishes, want the refusal", obs.published.Load())
	}
	if send := tel.one(t, trace.SpanKindProducer); send.Status().Code != codes.Error || attrs(send)["error.type"] != "error" {
		t.Errorf("status %v error.type %q", send.Status(), attrs(send)["error.type"])
	}
}

func TestPublishWithReceiptEndsTheSpanAtTheOutcome(t *testing.T) {
	tel := newRecorded(t, Config{})
	pub := tel.Publisher(artemis.NewPublisher(&fakelink.Sender{Outcome: fakelink.Reject}, "orders"), "orders")
	r, err := pub.PublishWithReceipt(context.Background(), artemis.Job(urnCreated, nil))
	if err != nil {
		t.Fatalf("PublishWithReceipt: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Wait(ctx); !errors.Is(err, artemis.ErrNotAccepted) {
		t.Fatalf("Wait: %v, want ErrNotAccepted", err)
	}
	// The span ends on the goroutine that waited for the receipt.
	for len(tel.ended(trace.SpanKindProducer)) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the send span never ended after the outcome")
		case <-time.After(time.Millisecond):
		}
	}
	send := tel.one(t, trace.SpanKindProducer)
	if attrs(send)["error.type"] != "not_accepted" || attrs(send)["messaging.message.id"] != r.ID() {
		t.Errorf("error.type %q message id %q, want not_accepted and %s", attrs(send)["error.type"], attrs(send)["messaging.message.id"], r.ID())
	}
}

func TestAPropagatorOfTheCallersChoice(t *testing.T) {
	tel := newRecorded(t, Config{Propagator: propagation.Baggage{}})
	s := &fakelink.Sender{}
	pub := tel.Publisher(artemis.NewPublisher(s, "orders"), "orders")
	if _, err := pub.Publish(context.Background(), artemis.Job(urnCreated, nil)); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Sent()[0].ApplicationProperties["traceparent"]; ok {
		t.Error("a traceparent was injected by a Baggage-only propagator")
	}
}

func decode(t testing.TB, m *amqp.Message) *artemis.Envelope {
	t.Helper()
	body, _ := m.Value.(string) // the projection's body is an AMQP string value
	env, err := artemis.Decode([]byte(body))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return env
}
