package artemis_test

// Integration tests against a real Apache Artemis broker. They run when
// ARTEMIS_URL is set (scripts/test sets it) and are skipped otherwise. Each
// test uses fresh queue names, go-amqp links with the "queue" capability,
// bounded waits, and closes its connection at the end.
//
// This file holds the round trip and the helpers the other
// integration_*_test.go files share.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

const (
	// arrival bounds a wait for something that must happen.
	arrival = 30 * time.Second
	// quiet is how long a wait for something that must not happen lasts.
	quiet = 1500 * time.Millisecond
)

// onBroker is the prologue of the integration tests: the broker (the test
// is skipped without it), one connection to it with a session, and a fresh
// queue name.
func onBroker(t *testing.T) (*brokertest.Broker, *brokertest.Conn, string) {
	t.Helper()
	b := brokertest.Require(t)
	return b, b.Dial(t), brokertest.Queue(t)
}

// listener runs Consumer.Listen on its own receiver in the background.
type listener struct {
	t      *testing.T
	conn   *brokertest.Conn
	r      *amqp.Receiver
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// listen attaches a receiver to queue with the given credit and runs
// cons.Listen on it until stop (or the end of the test).
func listen(t *testing.T, conn *brokertest.Conn, queue string, cons *artemis.Consumer, credit int32) *listener {
	t.Helper()
	r := conn.NewReceiver(queue, &brokertest.ReceiverOptions{Credit: credit})
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{t: t, conn: conn, r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { l.done <- cons.Listen(ctx, r) }()
	t.Cleanup(l.stop)
	return l
}

// stop cancels Listen, waits for it to return nil, and detaches the
// receiver, so the broker takes back anything it still held.
func (l *listener) stop() {
	l.t.Helper()
	l.once.Do(func() {
		l.cancel()
		select {
		case err := <-l.done:
			assert.NoError(l.t, err, "Listen's return after cancel")
		case <-time.After(arrival):
			l.t.Fatalf("Listen did not return within %v of its context's end", arrival)
		}
		l.conn.CloseReceiver(l.r)
	})
}

// errorLog collects what the consumer reports.
type errorLog struct{ ch chan *artemis.DeliveryError }

func newErrorLog() *errorLog { return &errorLog{ch: make(chan *artemis.DeliveryError, 256)} }

func (e *errorLog) onError(_ context.Context, err error, _ *artemis.Envelope, _ *amqp.Message) {
	var de *artemis.DeliveryError
	if !errors.As(err, &de) {
		de = &artemis.DeliveryError{Kind: errors.New("not a *DeliveryError"), Err: err}
	}
	e.ch <- de
}

// next waits for the next report.
func (e *errorLog) next(t *testing.T) *artemis.DeliveryError {
	t.Helper()
	select {
	case de := <-e.ch:
		return de
	case <-time.After(arrival):
		t.Fatalf("no error reported within %v", arrival)
		return nil
	}
}

// none asserts that nothing more was reported.
func (e *errorLog) none(t *testing.T) {
	t.Helper()
	select {
	case de := <-e.ch:
		t.Errorf("unexpected report: %v", de)
	default:
	}
}

// assertNothingLeft asserts that the consumer reported nothing more and
// that every one of queues is empty.
func assertNothingLeft(t *testing.T, errs *errorLog, conn *brokertest.Conn, queues ...string) {
	t.Helper()
	errs.none(t)
	for _, q := range queues {
		assertEmpty(t, conn, q)
	}
}

// handled is what a handler saw of one delivery.
type handled struct {
	env     *artemis.Envelope
	msg     *amqp.Message
	headers artemis.HeaderCarrier
}

// handleOne listens on q with a Consumer whose one handler, for urn,
// records what it saw, and returns the first call once the Consumer has
// stopped. A report to errs instead fails the test, and so does no call
// within arrival.
func handleOne(t *testing.T, conn *brokertest.Conn, q, urn string, errs *errorLog) handled {
	t.Helper()
	got := make(chan handled, 1)
	cons := artemis.NewConsumer(artemis.Handlers{urn: func(ctx context.Context, env *artemis.Envelope, msg *amqp.Message) error {
		got <- handled{env, msg, artemis.HeadersFromContext(ctx)}
		return nil
	}}, artemis.WithOnError(errs.onError))
	l := listen(t, conn, q, cons, 1)

	var h handled
	select {
	case h = <-got:
	case de := <-errs.ch:
		t.Fatalf("reported instead of handled: %v", de)
	case <-time.After(arrival):
		t.Fatalf("the handler was not called within %v", arrival)
	}
	l.stop()
	return h
}

// consumeInBackground runs c.Consume on q in the background until the
// returned stop is called (or the test ends); stop waits up to wait for
// Consume to return and checks that it returned nil.
func consumeInBackground(t *testing.T, c *artemis.Client, q string, cons *artemis.Consumer,
	opts *artemis.ConsumeOptions, wait time.Duration,
) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, q, cons, opts) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err, "Consume's return after its context ended")
			case <-time.After(wait):
				t.Errorf("Consume did not return within %v of its context's end", wait)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// receiveOn waits for one message on addr, accepts it and detaches.
func receiveOn(t *testing.T, conn *brokertest.Conn, addr string, opts *brokertest.ReceiverOptions) *amqp.Message {
	t.Helper()
	r := conn.NewReceiver(addr, opts)
	defer conn.CloseReceiver(r)
	msg := conn.Receive(r, arrival)
	if msg == nil {
		t.Fatalf("no message on %s within %v", addr, arrival)
	}
	conn.Accept(r, msg)
	return msg
}

// assertEmpty drains addr and fails for every message found.
func assertEmpty(t *testing.T, conn *brokertest.Conn, addr string) {
	t.Helper()
	for _, m := range conn.Drain(addr, "") {
		t.Errorf("%s is not empty: message-id %v, body %v", addr, m.Properties.MessageID, bodyOf(m))
	}
}

// bodyOf renders a message body for a failure message.
func bodyOf(m *amqp.Message) string {
	switch {
	case m.Value != nil:
		if s, ok := m.Value.(string); ok {
			return s
		}
		return "value " + strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(jsonString(m.Value), "\n", " "), "  ", " "))
	case len(m.Data) > 0:
		return "data " + string(m.Data[0])
	}
	return "<no body>"
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// valueString returns the body of a message whose body must be an AMQP
// value section holding a string (what a JMS TextMessage is).
func valueString(t *testing.T, m *amqp.Message) string {
	t.Helper()
	s, ok := m.Value.(string)
	require.Truef(t, ok, "the body is a %T (data sections: %d), want an AMQP value string", m.Value, len(m.Data))
	return s
}

// contractProperties are the four bq_ application properties of a fresh
// envelope published by this library.
var contractProperties = map[string]any{
	"bq_schema_version": "1",
	"bq_source_lang":    "go",
	"bq_attempts":       "0",
	"bq_app_id":         "babelqueue",
}

// roundTripData exercises the canonical encoding on the wire: an integer
// above 2^53, characters that must not be HTML-escaped, a slash, and
// non-ASCII text written as UTF-8.
const roundTripData = `{"order_id":1042,"big":12345678901234567890,"note":"<b>café</b> & a/b","city":"Zürich"}`

// assertProjection checks the section 2 projection of env on a message as
// it arrived from the broker.
func assertProjection(t *testing.T, env *artemis.Envelope, got *amqp.Message) {
	t.Helper()
	assert.Equal(t, env.Job, got.Annotations[artemis.AnnotationJMSType], "x-opt-jms-type")
	require.NotNil(t, got.Properties, "properties")
	assert.Equal(t, env.TraceID, got.Properties.CorrelationID, "correlation-id is the trace id, as a string")
	assert.Equal(t, env.Meta.ID, got.Properties.MessageID, "message-id is meta.id, as a string")
	if assert.NotNil(t, got.Properties.CreationTime, "creation-time") {
		assert.Equal(t, env.Meta.CreatedAt, got.Properties.CreationTime.UnixMilli(), "creation-time is meta.created_at")
	}
	if assert.NotNil(t, got.Properties.ContentType, "content-type") {
		assert.Equal(t, "application/json", *got.Properties.ContentType)
	}
	if assert.NotNil(t, got.Header, "header") {
		assert.True(t, got.Header.Durable, "durable")
	}
}

// TestIntegrationPublishConsumeRoundTrip sends an envelope through the
// Publisher's link and reads it back raw: the body is byte-identical to
// the canonical encoding and the projection survives the broker.
func TestIntegrationPublishConsumeRoundTrip(t *testing.T) {
	_, conn, q := onBroker(t)
	sender := conn.NewSender(q)
	pub := artemis.NewPublisher(sender, q)
	const urn = "urn:babel:orders:created"
	const trace = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"

	env, err := artemis.NewEnvelope(urn, json.RawMessage(roundTripData),
		artemis.EnvelopeQueue(q), artemis.EnvelopeTraceID(trace))
	require.NoError(t, err)
	encoded, err := env.Encode()
	require.NoError(t, err)
	want := string(encoded)
	projected, err := artemis.NewMessage(env)
	require.NoError(t, err)
	require.Equal(t, want, valueString(t, projected), "NewMessage carries the canonical encoding")
	assert.Contains(t, want, `"note":"<b>café</b> & a/b"`, "no HTML escaping, no escaped slash, UTF-8")
	assert.Contains(t, want, `"big":12345678901234567890`)

	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	id, err := pub.PublishEnvelope(ctx, env)
	require.NoError(t, err)
	require.Equal(t, env.Meta.ID, id, "PublishEnvelope returns meta.id")

	got := receiveOn(t, conn, q, nil)
	assert.Equal(t, want, valueString(t, got), "the body is byte-identical after the broker")
	assertProjection(t, env, got)
	assert.Equal(t, uint32(0), got.Header.DeliveryCount, "first delivery")
	assert.Equal(t, contractProperties, got.ApplicationProperties,
		"exactly the four bq_ application properties, all strings")
	assertEmpty(t, conn, q)
}

// TestIntegrationPublishListenRoundTrip publishes with Publisher.Publish and
// consumes with Consumer.Listen: the handler sees the envelope, the
// reconciled attempts and the out-of-band headers.
func TestIntegrationPublishListenRoundTrip(t *testing.T) {
	_, conn, q := onBroker(t)
	pub := artemis.NewPublisher(conn.NewSender(q), q)
	const urn = "urn:babel:orders:created"
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	id, err := pub.Publish(ctx, urn, json.RawMessage(roundTripData),
		artemis.WithTraceID("  trace-abc-123  "), artemis.WithHeaders(map[string]string{"traceparent": traceparent}))
	require.NoError(t, err)

	errs := newErrorLog()
	h := handleOne(t, conn, q, urn, errs)

	assert.Equal(t, urn, h.env.Job)
	assert.Equal(t, "trace-abc-123", h.env.TraceID, "the trace id is trimmed and reused")
	assert.Equal(t, id, h.env.Meta.ID, "Publish returned meta.id")
	assert.Equal(t, q, h.env.Meta.Queue)
	assert.Equal(t, "go", h.env.Meta.Lang)
	assert.Equal(t, 1, h.env.Meta.SchemaVersion)
	assert.Equal(t, 0, h.env.Attempts)
	assert.Nil(t, h.env.DeadLetter)
	assert.Equal(t, roundTripData, string(h.env.Data), "data bytes survive, big integer included")
	var order struct {
		OrderID int64  `json:"order_id"`
		City    string `json:"city"`
	}
	require.NoError(t, h.env.Bind(&order))
	assert.Equal(t, int64(1042), order.OrderID)
	assert.Equal(t, "Zürich", order.City)

	assertProjection(t, h.env, h.msg)
	body := valueString(t, h.msg)
	reencoded, err := h.env.Encode()
	require.NoError(t, err)
	assert.Equal(t, body, string(reencoded), "the published body is the canonical encoding")

	wantHeaders := artemis.HeaderCarrier{"traceparent": traceparent}
	for k, v := range contractProperties {
		wantHeaders[k] = v.(string)
	}
	assert.Equal(t, wantHeaders, h.headers, "out-of-band headers: every application property as a string")
	assertNothingLeft(t, errs, conn, q)
}
