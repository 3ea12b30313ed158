// Package integration_test runs the library against a real Apache Artemis
// broker, through its exported API only. Each test gets the broker from
// internal/brokertest, which skips the test with one line when ARTEMIS_URL
// is not set (scripts/test sets it); it uses fresh queue names, go-amqp
// links with the "queue" capability, bounded waits, and closes its
// connection at the end.
//
// This file holds the helpers of the package's tests: a broker from
// ARTEMIS_URL, listeners, error logs, receive and projection checks. The
// helpers the fault tests (faults/) use as well are in internal/testkit.
package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatewayError is a handler failure with a type name of its own, so the
// dead_letter block's exception can be checked.
type gatewayError struct{}

func (*gatewayError) Error() string { return "payment gateway timeout" }

// call is one handler invocation.
type call struct {
	attempts      int
	deliveryCount uint32
}

func nextCall(t *testing.T, calls <-chan call) call {
	t.Helper()
	select {
	case c := <-calls:
		return c
	case <-time.After(arrival):
		t.Fatalf("the handler was not called within %v", arrival)
		return call{}
	}
}

// publishEnvelope publishes a fresh envelope for urn on q and returns it
// with its encoded body.
func publishEnvelope(t *testing.T, pub *artemis.Publisher, q, urn string) (*artemis.Envelope, string) {
	t.Helper()
	env, err := artemis.NewEnvelope(urn, json.RawMessage(`{"order_id":1042,"big":12345678901234567890}`), artemis.EnvelopeQueue(q))
	require.NoError(t, err)
	body, err := env.Encode()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	_, err = pub.Publish(ctx, env)
	require.NoError(t, err)
	return env, string(body)
}

// wantDeadLetterBody is the exact DLQ body for an envelope published by
// this library: the original bytes with the reconciled attempts and the
// block. failed_at is taken from the copy (checked against the window).
func wantDeadLetterBody(t *testing.T, original string, got *artemis.Envelope, errText, exception *string, reason, queue string, attempts int) string {
	t.Helper()
	require.NotNil(t, got.DeadLetter, "the copy has a dead_letter block")
	const tail = `,"attempts":0}`
	require.True(t, strings.HasSuffix(original, tail), "a fresh envelope ends with attempts 0: %s", original)
	opt := func(s *string) string {
		if s == nil {
			return "null"
		}
		b, err := json.Marshal(*s)
		require.NoError(t, err)
		return string(b)
	}
	return fmt.Sprintf(`%s,"attempts":%d,"dead_letter":{"reason":%q,"error":%s,"exception":%s,"failed_at":%d,"original_queue":%q,"attempts":%d,"lang":"go"}}`,
		strings.TrimSuffix(original, tail), attempts, reason, opt(errText), opt(exception), got.DeadLetter.FailedAt, queue, attempts)
}

func ptr(s string) *string { return &s }

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

// onBrokerPublisher is onBroker with a Publisher on the fresh queue.
func onBrokerPublisher(t *testing.T) (*brokertest.Broker, *brokertest.Conn, string, *artemis.Publisher) {
	t.Helper()
	b, conn, q := onBroker(t)
	return b, conn, q, artemis.NewPublisher(conn.NewSender(q), q)
}

// onBrokerClientPublisher is onBroker with a Client dialled to the broker
// and its publisher (opts) on the fresh queue; ctx, bounded by arrival, ends
// with the test, and the Client is closed then.
func onBrokerClientPublisher(t *testing.T, opts ...artemis.PublishOption) (context.Context, *brokertest.Conn, string, *artemis.ClientPublisher) {
	t.Helper()
	b, conn, q := onBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	t.Cleanup(cancel)
	c, err := artemis.Dial(ctx, []string{b.URL}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	pub, err := c.Publisher(ctx, q, opts...)
	require.NoError(t, err)
	return ctx, conn, q, pub
}

// recordCalls is a handler that sends each delivery's attempts and
// delivery-count to calls and returns what result returns.
func recordCalls(calls chan<- call, result func() error) artemis.HandlerFunc {
	return func(_ context.Context, env *artemis.Envelope, msg *amqp.Message) error {
		calls <- call{env.Attempts, msg.Header.DeliveryCount}
		return result()
	}
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
		de = &artemis.DeliveryError{Err: fmt.Errorf("not a *DeliveryError: %w", err)} // KindNone: matches no sentinel
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
	cons := testkit.MustConsumer(t, artemis.Handlers{urn: func(ctx context.Context, env *artemis.Envelope, msg *amqp.Message) error {
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

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// publishReceipts publishes each envelopes of urn with data {"w": w, "i":
// i} from each of workers goroutines w through pub with PublishWithReceipt,
// and returns every worker's receipts in order. A worker stops at its
// first error, which fails the test.
func publishReceipts(t *testing.T, ctx context.Context, pub *artemis.Publisher, urn string, workers, each int) [][]*artemis.Receipt {
	t.Helper()
	receipts := make([][]*artemis.Receipt, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r, err := pub.PublishWithReceipt(ctx, artemis.Job(urn, map[string]int{"w": w, "i": i}))
				if !assert.NoError(t, err) {
					return
				}
				receipts[w] = append(receipts[w], r)
			}
		})
	}
	wg.Wait()
	return receipts
}

// maskSecret replaces every occurrence of secret in s (a peer's output)
// with xxxxx, as the library masks a password; an empty secret masks
// nothing.
func maskSecret(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "xxxxx")
}
