package artemis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileConsumer is a consumer on queue "orders" with a confirming DLQ
// sender, the recorder as its error callback and h for urnCreated.
func hostileConsumer(t testing.TB, h HandlerFunc, opts ...ConsumerOption) (*Consumer, *recorder, *fakelink.Sender) {
	rec := newRecorder()
	dlq := &fakelink.Sender{}
	all := append([]ConsumerOption{WithOnError(rec.onError), WithDeadLetterSender(dlq), WithQueue("orders")}, opts...)
	return mustConsumer(t, Handlers{urnCreated: h}, all...), rec, dlq
}

// neverCalled is the handler of tests whose message must not reach one.
func neverCalled(t *testing.T) HandlerFunc {
	return func(context.Context, *Envelope, *amqp.Message) error {
		t.Error("the message reached a handler")
		return nil
	}
}

// requireReport asserts exactly one report, of kind, with disposition disp.
func requireReport(t *testing.T, got outcome, kind error, disp Disposition) *DeliveryError {
	t.Helper()
	require.Len(t, got.reports, 1, "reports: %v", got.reports)
	err := got.reports[0].err
	require.ErrorIs(t, err, kind)
	var de *DeliveryError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, disp, de.Disposition)
	assert.ErrorIs(t, got.ret, kind, "Handle returns what it reported")
	return de
}

// requirePoisonRecord asserts a poison delivery that was dead-lettered:
// reported as ErrPoison, accepted after the copy, the copy a valid JSON
// record with reason poison. It returns the record and the reported error.
func requirePoisonRecord(t *testing.T, got outcome) (string, *DeliveryError) {
	t.Helper()
	de := requireReport(t, got, ErrPoison, DispositionDeadLettered)
	assert.Equal(t, fakelink.Accepted, got.disp, "accepted after the confirmed copy")
	require.Len(t, got.dlq, 1, "one confirmed DLQ copy")
	record, ok := got.dlq[0].Value.(string)
	require.True(t, ok, "the record is an AMQP string value, got %T", got.dlq[0].Value)
	require.True(t, json.Valid([]byte(record)), "the record is valid JSON")
	var parsed struct {
		DeadLetter DeadLetter `json:"dead_letter"`
	}
	require.NoError(t, json.Unmarshal([]byte(record), &parsed))
	assert.Equal(t, ReasonPoison, parsed.DeadLetter.Reason)
	require.NotNil(t, parsed.DeadLetter.Error)
	assert.Equal(t, de.Err.Error(), *parsed.DeadLetter.Error, "the record carries the reported cause")
	return record, de
}

// rawOf returns the raw field of a poison record of a non-object body.
func rawOf(t *testing.T, record string) string {
	t.Helper()
	var r struct {
		Raw *string `json:"raw"`
	}
	require.NoError(t, json.Unmarshal([]byte(record), &r))
	require.NotNil(t, r.Raw, "the record has no raw field")
	return *r.Raw
}

// envelopeBody is the contract envelope with data replaced by the given raw
// JSON object.
func envelopeBody(data string) string {
	return strings.Replace(fuzzEnvelope, `{"order_id":1042}`, data, 1)
}

type fakeBroker struct {
	t *testing.T

	mu      sync.Mutex
	dials   []*broker   // every dial attempt, in order
	conns   []*fakeConn // every connection opened, in order
	dialErr func(n int, b *broker) error
	block   func(ctx context.Context, b *broker) error // runs before dialErr; may wait on ctx
	setup   func(c *fakeConn)                          // prepares each new connection
}

func newFakeBroker(t *testing.T) *fakeBroker { return &fakeBroker{t: t} }

func (f *fakeBroker) dial(ctx context.Context, b *broker) (amqpConn, error) {
	f.mu.Lock()
	f.dials = append(f.dials, b)
	n := len(f.dials)
	block, dialErr := f.block, f.dialErr
	f.mu.Unlock()
	if block != nil {
		if err := block(ctx, b); err != nil {
			return nil, err
		}
	}
	if dialErr != nil {
		if err := dialErr(n, b); err != nil {
			return nil, err
		}
	}
	c := &fakeConn{t: f.t, addr: b.addr, done: make(chan struct{})}
	f.mu.Lock()
	f.conns = append(f.conns, c)
	setup := f.setup
	f.mu.Unlock()
	if setup != nil {
		setup(c)
	}
	return c, nil
}

func (f *fakeBroker) dialed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.dials))
	for i, b := range f.dials {
		out[i] = b.addr
	}
	return out
}

func (f *fakeBroker) conn(i int) *fakeConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Less(f.t, i, len(f.conns), "connection %d was never opened", i)
	return f.conns[i]
}

func (f *fakeBroker) connCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// fakeConn is a connection and its session.
type fakeConn struct {
	t    *testing.T
	addr string

	done chan struct{}
	once sync.Once
	err  error

	mu        sync.Mutex
	senders   []*fakelink.Sender
	receivers []*fakelink.Receiver

	// outcome decides the transfers of senders attached from now on.
	outcome func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error)
	// attachErr, when set, refuses attaches to the address.
	attachErr func(addr string, receiver bool) error
	// deliveries are queued on each receiver attached from now on.
	deliveries func() []*amqp.Message
	// attached hears of every receiver attached.
	attached chan *fakelink.Receiver
	// closeHook, when set, runs at the start of Close (it may block, as
	// the close of a connection on a half-open network does: hangClose).
	closeHook func()
}

// hangClose makes c's Close hang until unblock is closed, as go-amqp's does
// on a half-open network: a connection the Client dropped stays open for a
// while. Set before c is handed to the Client.
func hangClose(c *fakeConn, unblock <-chan struct{}) {
	c.closeHook = func() { <-unblock }
}

func (c *fakeConn) NewSession(context.Context, *amqp.SessionOptions) (amqpSession, error) {
	return c, nil
}

func (c *fakeConn) Done() <-chan struct{} { return c.done }

func (c *fakeConn) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

func (c *fakeConn) Close() error {
	if c.closeHook != nil {
		c.closeHook()
	}
	c.kill(nil)
	return nil
}

// kill ends the connection as a broker restart does: every link fails with
// a *amqp.ConnError.
func (c *fakeConn) kill(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.done)
		c.mu.Lock()
		rs := append([]*fakelink.Receiver(nil), c.receivers...)
		c.mu.Unlock()
		for _, r := range rs {
			r.Fail(&amqp.ConnError{})
		}
	})
}

// gate fails the transfers of a dead connection's senders.
func (c *fakeConn) gate() error {
	if c.dead() {
		return &amqp.ConnError{}
	}
	return nil
}

func (c *fakeConn) dead() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *fakeConn) NewSender(_ context.Context, target string, opts *amqp.SenderOptions) (linkSender, error) {
	if c.dead() {
		return nil, &amqp.ConnError{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.attachErr != nil {
		if err := c.attachErr(target, false); err != nil {
			return nil, err
		}
	}
	s := &fakelink.Sender{Outcome: c.outcome, Address: target, Options: opts, Gate: c.gate, Verdict: outcomeError}
	c.senders = append(c.senders, s)
	return s, nil
}

func (c *fakeConn) NewReceiver(_ context.Context, source string, opts *amqp.ReceiverOptions) (linkReceiver, error) {
	if c.dead() {
		return nil, &amqp.ConnError{}
	}
	c.mu.Lock()
	if c.attachErr != nil {
		if err := c.attachErr(source, true); err != nil {
			c.mu.Unlock()
			return nil, err
		}
	}
	r := fakelink.NewReceiver(c.t, source)
	r.Options = opts
	if c.deliveries != nil {
		for _, m := range c.deliveries() {
			r.Push(m)
		}
	}
	c.receivers = append(c.receivers, r)
	attached := c.attached
	c.mu.Unlock()
	if attached != nil {
		attached <- r
	}
	return r, nil
}

func (c *fakeConn) sendersTo(addr string) []*fakelink.Sender {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*fakelink.Sender
	for _, s := range c.senders {
		if s.Address == addr {
			out = append(out, s)
		}
	}
	return out
}

func (c *fakeConn) receiverList() []*fakelink.Receiver {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*fakelink.Receiver(nil), c.receivers...)
}

// events records every ConnectionEvent.
type events struct {
	mu  sync.Mutex
	all []ConnectionEvent
	ch  chan ConnectionEvent
}

func newEvents() *events { return &events{ch: make(chan ConnectionEvent, 4096)} }

func (e *events) on(ev ConnectionEvent) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	e.ch <- ev
}

func (e *events) list() []ConnectionEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]ConnectionEvent(nil), e.all...)
}

// kinds lists the kinds seen, leaving out EventDisconnected, which the
// connection watcher reports from its own goroutine at its own pace.
func (e *events) kinds() []ConnectionEventKind {
	var out []ConnectionEventKind
	for _, ev := range e.list() {
		if ev.Kind != EventDisconnected {
			out = append(out, ev.Kind)
		}
	}
	return out
}

// wait returns the next event of kind, failing the test after a while.
func (e *events) wait(t *testing.T, kind ConnectionEventKind) ConnectionEvent {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-e.ch:
			if ev.Kind == kind {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event; saw %v", kind, e.kinds())
			return ConnectionEvent{}
		}
	}
}

// fakeTimers replaces time.After: it records every wait, and fires at once
// unless hold is set.
type fakeTimers struct {
	hold   bool
	delays chan time.Duration
}

func newFakeTimers() *fakeTimers { return &fakeTimers{delays: make(chan time.Duration, 4096)} }

func (f *fakeTimers) after(d time.Duration) <-chan time.Time {
	f.delays <- d
	ch := make(chan time.Time, 1)
	if !f.hold {
		ch <- time.Time{}
	}
	return ch
}

// next returns the next recorded wait.
func (f *fakeTimers) next(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-f.delays:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no backoff wait was started")
		return 0
	}
}

type harness struct {
	t      *testing.T
	fb     *fakeBroker
	ev     *events
	timers *fakeTimers
	log    *fakelink.LogBuffer
	c      *Client       // the user's Client
	b      *brokerClient // its backend
}

// newHarness builds a Client over a fake broker, without dialing. The
// random source always answers 0.5; timers fire at once.
func newHarness(t *testing.T, urls []string, opts *ClientOptions, prepare func(*fakeBroker)) *harness {
	t.Helper()
	h := &harness{t: t, fb: newFakeBroker(t), ev: newEvents(), timers: newFakeTimers(), log: &fakelink.LogBuffer{}}
	if prepare != nil {
		prepare(h.fb)
	}
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	o.OnEvent = h.ev.on
	o.Logger = slog.New(slog.NewJSONHandler(h.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := newClient(urls, &o, h.fb.dial)
	require.NoError(t, err)
	b.random = func() float64 { return 0.5 }
	b.after = h.timers.after
	c := clientOver(b)
	h.b, h.c = b, c
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return h
}

// senderOf is the reconnecting sender under p, a publisher of a Client on
// one broker.
func senderOf(p *ClientPublisher) *clientSender { return p.link.(*clientSender) }

// dial is what Dial does after building the Client.
func (h *harness) dial() error {
	_, err := h.b.connection(context.Background())
	return err
}

var refused = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}

const secret = "s3cr3t-Pa55"

const (
	benchURN     = "urn:babel:orders:created"
	benchUnknown = "urn:babel:orders:unknown"
	benchTrace   = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"
	benchQueue   = "orders"
)

func benchOrderStruct() benchOrder {
	return benchOrder{OrderID: 1042, Amount: 99.9, Currency: "USD", Note: "café ☕"}
}

func benchOrderMap() map[string]any {
	return map[string]any{"order_id": 1042, "amount": 99.9, "currency": "USD", "note": "café ☕"}
}

// benchNote1K is a 1,000-byte note: the order then encodes to about 1 KB.
var benchNote1K = strings.Repeat("café ☕ ", 100)[:1000]

// benchOrderStruct1K and benchOrderMap1K are the order with a 1 KB note.
func benchOrderStruct1K() benchOrder {
	o := benchOrderStruct()
	o.Note = benchNote1K
	return o
}

func benchOrderMap1K() map[string]any {
	m := benchOrderMap()
	m["note"] = benchNote1K
	return m
}

// benchRoundTrip is what one message costs in the codec from end to end:
// the publisher makes and encodes it, the consumer decodes and validates it.
func benchRoundTrip(data any) (*Envelope, error) {
	env, err := NewEnvelope(benchURN, data, EnvelopeTraceID(benchTrace), EnvelopeQueue(benchQueue))
	if err != nil {
		return nil, err
	}
	body, err := env.Encode()
	if err != nil {
		return nil, err
	}
	got, err := Decode(body)
	if err != nil {
		return nil, err
	}
	return got, got.Validate()
}

// benchFloorJSON is what any JSON publisher and consumer pay for the same data
// without an envelope: marshal it, unmarshal it into a map.
func benchFloorJSON(data any) (map[string]any, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// benchBody is the canonical body of the order-created envelope, as a
// consumer receives it.
func benchBody(tb testing.TB) []byte {
	tb.Helper()
	env, err := NewEnvelope(benchURN, benchOrderStruct(), EnvelopeTraceID(benchTrace), EnvelopeQueue(benchQueue),
		EnvelopeCreatedAt(time.UnixMilli(1749132727000)))
	require.NoError(tb, err)
	body, err := env.Encode()
	require.NoError(tb, err)
	return body
}

func benchDecodeValidate(body []byte) (*Envelope, error) {
	env, err := Decode(body)
	if err != nil {
		return nil, err
	}
	return env, env.Validate()
}

// benchDelivery is the order-created message as the broker delivers it on
// its first delivery.
func benchDelivery(tb testing.TB, urn string) *amqp.Message {
	tb.Helper()
	env, err := NewEnvelope(urn, benchOrderStruct(), EnvelopeTraceID(benchTrace), EnvelopeQueue(benchQueue))
	require.NoError(tb, err)
	msg, err := NewMessage(env)
	require.NoError(tb, err)
	return msg
}

func benchAcceptOrder(_ context.Context, env *Envelope, _ *amqp.Message) error {
	if env.Attempts != 0 {
		return errors.New("unexpected attempts")
	}
	return nil
}

// benchPoisonBody would be poison if it were decoded: an unknown-URN message
// routed on its annotation must never get that far.
const benchPoisonBody = `{"job":"urn:babel:orders:unknown","data":[not json`

// benchFloorMessage builds by hand the message Publish puts on the wire, around
// a body that is already encoded: the least any AMQP publisher of this
// projection pays per message.
//
// The URN, trace id, message id and body vary per message, so they are
// parameters (boxing a variable string allocates, a constant does not); the
// bq_ values are constants here as in any hand-written publisher.
//
//go:noinline
func benchFloorMessage(urn, trace, id, body string, created time.Time) *amqp.Message {
	return &amqp.Message{
		Header:      &amqp.MessageHeader{Durable: true, Priority: 4},
		Annotations: amqp.Annotations{AnnotationJMSType: urn},
		Properties: &amqp.MessageProperties{
			MessageID:     id,
			CorrelationID: trace,
			ContentType:   &contentType,
			Subject:       &urn,
			CreationTime:  &created,
		},
		ApplicationProperties: map[string]any{
			PropSchemaVersion: "1",
			PropSourceLang:    Lang,
			PropAttempts:      "0",
			PropAppID:         AppID,
		},
		Value: body,
	}
}

// benchFloorPublish builds the floor message and sends it as Publish does.
func benchFloorPublish(ctx context.Context, s Sender, body, id string, created time.Time) error {
	return sendConfirmed(ctx, s, benchFloorMessage(benchURN, benchTrace, id, body, created))
}

const benchMessageID = "f1e2d3c4-b5a6-4789-90ab-cdef01234567"

var scanSeeds = []string{
	`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042,"amount":99.9,"currency":"USD","note":"café ☕"},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`,
	` { "urn" : "urn:x" , "trace_id" : "t" , "data" : { "a" : [ 1 , -2.5e+3 , true , false , null , { } , [ ] ] } , "meta" : { "schema_version" : 1 , "x" : [ ] } , "attempts" : 3 , "y" : "z" } `,
	`{"job":"\u0075rn:x","tr\u0061ce_id":"\ud800\t\"\\\/\b\f\n\r","data":{"\u00e9":"\uFFFF"},"meta":{"schema_version":1,"m\u0065ta":0},"attempts":0,"dead_letter":{"reason":"failed","error":null,"exception":null,"failed_at":1,"original_queue":"q","attempts":3,"lang":"go"}}`,
	`{"job":"urn:x","job":"urn:y","data":{},"meta":{"schema_version":1},"meta":{"id":"a"},"attempts":0}`,
	`{"job":1,"data":[],"meta":"m","attempts":1.5,"dead_letter":7}`,
	`{}`, `{"a":{}}`, `[]`, `null`, `"s"`, `0`, ``, ` `,
	`{"n":0}`, `{"n":-0}`, `{"n":-}`, `{"n":01}`, `{"n":1.}`, `{"n":.5}`, `{"n":1e}`, `{"n":1e+}`, `{"n":1E-07}`, `{"n":+1}`,
	`{"s":"\x"}`, `{"s":"\x0041"}`, `{"s":"\U0041"}`, `{"s":"\'"}`, `{"s":"\a"}`, `{"s":"\u12"}`, `{"s":"\u12g4"}`, "{\"s\":\"a\x01b\"}", "{\"s\":\"\xff\"}", "{\"s\":\"\xed\xa0\x80\"}", "{\"s\":\"\xc3\xa9\xe2\x98\x95\xf0\x9f\x98\x80\"}",
	`{"a":tru}`, `{"a":nul}`, `{"a":falsey}`, `{"a" "b"}`, `{"a":1,}`, `{,"a":1}`, `{"a":1 "b":2}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":1}}`, `{"a":1} x`, `{"a":1`, `{"a":"1`, `{"a`, `{1:2}`,
	"\ufeff{}", "{\"a\":1}\x00", "{\n\t\"a\"\r:\n1\t}",
}

// allTexts returns the text of err and of every error it wraps.
func allTexts(err error) []string {
	if err == nil {
		return nil
	}
	out := []string{err.Error()}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		out = append(out, allTexts(u.Unwrap())...)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, allTexts(e)...)
		}
	}
	return out
}

const (
	urnCreated = "urn:babel:orders:created"
	testTrace  = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"
)

type recorder struct {
	mu   sync.Mutex
	errs []reported
	ch   chan reported
}

func newRecorder() *recorder { return &recorder{ch: make(chan reported, 1024)} }

func (r *recorder) onError(_ context.Context, err error, env *Envelope, msg *amqp.Message) {
	r.mu.Lock()
	r.errs = append(r.errs, reported{err, env, msg})
	r.mu.Unlock()
	r.ch <- reported{err, env, msg}
}

func (r *recorder) all() []reported {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]reported(nil), r.errs...)
}

// orderMessage is what a BabelQueue publisher puts on the wire for the
// contract's order-created envelope, with the given delivery count.
func orderMessage(t testing.TB, deliveryCount uint32, opts ...PublishOption) *amqp.Message {
	t.Helper()
	env, err := NewEnvelope(urnCreated, json.RawMessage(`{"order_id":1042}`), EnvelopeTraceID(testTrace), EnvelopeQueue("orders"))
	require.NoError(t, err)
	msg, err := NewMessage(env, opts...)
	require.NoError(t, err)
	msg.Header.DeliveryCount = deliveryCount
	return msg
}

func rawMessage(body string) *amqp.Message {
	return &amqp.Message{Value: body, Header: &amqp.MessageHeader{}}
}

type outcome struct {
	disp    fakelink.Disposition
	reports []reported
	dlq     []*amqp.Message // accepted by the fake DLQ
	ret     error
}

// handleOne runs one delivery through Handle and returns what happened.
func handleOne(t *testing.T, c *Consumer, rec *recorder, dlq *fakelink.Sender, msg *amqp.Message) outcome {
	t.Helper()
	r := fakelink.NewReceiver(t, "orders")
	r.Track(msg)
	ret := c.Handle(context.Background(), r, msg)
	disp, ok := r.Disposition(msg)
	require.True(t, ok, "the delivery was not settled")
	var kept []*amqp.Message
	if dlq != nil {
		kept = dlq.Kept()
	}
	return outcome{disp: disp, reports: rec.all(), dlq: kept, ret: ret}
}

func failing(err error) HandlerFunc {
	return func(context.Context, *Envelope, *amqp.Message) error { return err }
}

func succeeding(context.Context, *Envelope, *amqp.Message) error { return nil }

func dlqEnvelope(t *testing.T, m *amqp.Message) *Envelope {
	t.Helper()
	s, ok := m.Value.(string)
	require.True(t, ok, "DLQ body is not an AMQP string value: %T", m.Value)
	env, err := Decode([]byte(s))
	require.NoError(t, err)
	require.NotNil(t, env.DeadLetter, "DLQ copy has no dead_letter block: %s", s)
	return env
}

type gatewayError struct{ msg string }

func (e *gatewayError) Error() string { return e.msg }

// dlqOutcomes are the broker answers a dead-letter write can get; only
// accepted confirms it.
var dlqOutcomes = []struct {
	name    string
	outcome func(context.Context, *amqp.Message) (amqp.DeliveryState, error)
	ok      bool
}{
	{"accepted", fakelink.Accept, true},
	{"rejected", fakelink.Reject, false},
	{"released", fakelink.Release, false},
	{"modified", fakelink.Modify, false},
	{"timed out", fakelink.Hang, false},
	{"link closed", fakelink.Closed, false},
}

var gateValues = []struct {
	name  string
	value any
	set   bool
	gated bool
}{
	{"missing", nil, false, false},
	{"null", nil, true, false},
	{"amqp null", amqp.Null{}, true, false},
	{"empty", "", true, false},
	{"blank", "  \t", true, false},
	{"1", "1", true, false},
	{"space 1", " 1", true, true},
	{"1 space", "1 ", true, true},
	{"2", "2", true, true},
	{"integer 1", int64(1), true, true},
	{"int32 1", int32(1), true, true},
	{"bool", true, true, true},
	{"binary 1", []byte("1"), true, true},
}

// assertGolden compares got with the golden file at path, byte for byte (no
// newline is added or stripped), or rewrites the file under -update.
func assertGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden %s: %v (run go test -run %s -update to create it)", path, err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("golden %s differs\n got: %s\nwant: %s", path, got, want)
	}
}

// goldenDir runs a table's cases as subtests, each with the path of its
// golden file, and knows which files the table names.
type goldenDir struct {
	t        *testing.T
	dir, ext string
	names    []string
}

func newGoldenDir(t *testing.T, dir, ext string) *goldenDir {
	return &goldenDir{t: t, dir: dir, ext: ext}
}

// run runs f as the subtest name, given the path of name's golden file.
func (g *goldenDir) run(name string, f func(t *testing.T, golden string)) {
	g.names = append(g.names, name)
	g.t.Run(name, func(t *testing.T) { f(t, filepath.Join(g.dir, name+g.ext)) })
}

// assertNoOrphans fails when the directory holds a golden file no case ran.
func (g *goldenDir) assertNoOrphans() {
	g.t.Helper()
	assertNoOrphanGoldens(g.t, g.dir, g.ext, g.names)
}

// assertNoOrphanGoldens fails when dir holds a golden file with the given
// extension that no case of the table produced: a renamed case must not
// leave a stale file behind.
func assertNoOrphanGoldens(t *testing.T, dir, ext string, names []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil {
		t.Fatal(err)
	}
	known := make(map[string]bool, len(names))
	for _, n := range names {
		known[n+ext] = true
	}
	for _, f := range files {
		if !known[filepath.Base(f)] {
			t.Errorf("golden %s belongs to no test case", f)
		}
	}
}

// contractExample is the order-created envelope of CONTRACT.md section 1,
// copied byte for byte.
const contractExample = `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`

const (
	contractTraceID   = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"
	contractMessageID = "f1e2d3c4-b5a6-4789-90ab-cdef01234567"
	contractCreatedAt = int64(1749132727000)
)

// fixedEnvelope builds an envelope with NewEnvelope and then pins meta.id
// and the trace id, so its encoding is deterministic.
func fixedEnvelope(t *testing.T, urn string, data any) *Envelope {
	t.Helper()
	env, err := NewEnvelope(urn, data,
		EnvelopeTraceID(contractTraceID),
		EnvelopeQueue("orders"),
		EnvelopeCreatedAt(time.UnixMilli(contractCreatedAt)))
	if err != nil {
		t.Fatalf("NewEnvelope: %v", err)
	}
	env.Meta.ID = contractMessageID
	return env
}

func mustDecode(t *testing.T, body string) *Envelope {
	t.Helper()
	env, err := Decode([]byte(body))
	if err != nil {
		t.Fatalf("Decode(%s): %v", body, err)
	}
	return env
}

func mustEncode(t *testing.T, env *Envelope) []byte {
	t.Helper()
	b, err := env.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return b
}

func assertUUIDv4(t *testing.T, what, s string) {
	t.Helper()
	u, err := uuid.Parse(s)
	if err != nil {
		t.Fatalf("%s %q is not a UUID: %v", what, s, err)
	}
	if u.Version() != 4 || u.Variant() != uuid.RFC4122 {
		t.Errorf("%s %q: version %d variant %v, want a v4 RFC 4122 UUID", what, s, u.Version(), u.Variant())
	}
	if s != u.String() {
		t.Errorf("%s %q is not in the canonical lower-case form %q", what, s, u.String())
	}
}

func ptr[T any](v T) *T { return &v }

type orderCreated struct {
	OrderID  int64    `json:"order_id"`
	Customer string   `json:"customer"`
	Tags     []string `json:"tags,omitempty"`
}

// decodeValidate is what a consumer does with a body: Decode, then Validate.
func decodeValidate(body string) (*Envelope, error) {
	env, err := Decode([]byte(body))
	if err != nil {
		return nil, err
	}
	return env, env.Validate()
}

const fuzzEnvelope = `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0}`

// wireDecoded returns msg as a peer reads it: marshalled and unmarshalled by
// go-amqp, so each property has the Go type go-amqp decodes it to.
func wireDecoded(t *testing.T, msg *amqp.Message) *amqp.Message {
	t.Helper()
	b, err := msg.MarshalBinary()
	require.NoError(t, err)
	var out amqp.Message
	require.NoError(t, out.UnmarshalBinary(b))
	return &out
}

// renderMessage writes an *amqp.Message as deterministic, indented JSON for
// the projection goldens: every header and property field, annotations and
// application properties sorted by key with their Go type names, and the
// body section kind with the body text.
func renderMessage(t *testing.T, msg *amqp.Message) []byte {
	t.Helper()
	type field struct {
		Key   string `json:"key"`
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	type typedValue struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	type header struct {
		Durable       bool   `json:"durable"`
		Priority      uint8  `json:"priority"`
		TTL           string `json:"ttl"`
		FirstAcquirer bool   `json:"first_acquirer"`
		DeliveryCount uint32 `json:"delivery_count"`
	}
	type properties struct {
		MessageID          *typedValue `json:"message_id"`
		UserID             *string     `json:"user_id"`
		To                 *string     `json:"to"`
		Subject            *string     `json:"subject"`
		ReplyTo            *string     `json:"reply_to"`
		CorrelationID      *typedValue `json:"correlation_id"`
		ContentType        *string     `json:"content_type"`
		ContentEncoding    *string     `json:"content_encoding"`
		AbsoluteExpiryTime *string     `json:"absolute_expiry_time"`
		CreationTime       *string     `json:"creation_time"`
		GroupID            *string     `json:"group_id"`
		GroupSequence      *uint32     `json:"group_sequence"`
		ReplyToGroupID     *string     `json:"reply_to_group_id"`
	}
	type rendered struct {
		Format                uint32      `json:"format"`
		Header                *header     `json:"header"`
		DeliveryAnnotations   []field     `json:"delivery_annotations"`
		Annotations           []field     `json:"annotations"`
		Properties            *properties `json:"properties"`
		ApplicationProperties []field     `json:"application_properties"`
		BodyKind              string      `json:"body_kind"`
		Body                  string      `json:"body"`
		Footer                []field     `json:"footer"`
	}
	value := func(v any) string {
		switch x := v.(type) {
		case time.Time:
			return fmt.Sprintf("%s (%d ms)", x.UTC().Format(time.RFC3339Nano), x.UnixMilli())
		case []byte:
			return fmt.Sprintf("%q", x)
		}
		return fmt.Sprint(v)
	}
	typed := func(v any) *typedValue {
		if v == nil {
			return nil
		}
		return &typedValue{Type: fmt.Sprintf("%T", v), Value: value(v)}
	}
	annotations := func(a amqp.Annotations) []field {
		out := []field{}
		for k, v := range a {
			out = append(out, field{Key: fmt.Sprint(k), Type: fmt.Sprintf("%T", v), Value: value(v)})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
		return out
	}
	timeString := func(t *time.Time) *string {
		if t == nil {
			return nil
		}
		s := value(*t)
		return &s
	}

	r := rendered{
		Format:                msg.Format,
		DeliveryAnnotations:   annotations(msg.DeliveryAnnotations),
		Annotations:           annotations(msg.Annotations),
		ApplicationProperties: []field{},
		Footer:                annotations(msg.Footer),
	}
	if h := msg.Header; h != nil {
		r.Header = &header{Durable: h.Durable, Priority: h.Priority, TTL: h.TTL.String(), FirstAcquirer: h.FirstAcquirer, DeliveryCount: h.DeliveryCount}
	}
	if p := msg.Properties; p != nil {
		r.Properties = &properties{
			MessageID: typed(p.MessageID), To: p.To, Subject: p.Subject, ReplyTo: p.ReplyTo,
			CorrelationID: typed(p.CorrelationID), ContentType: p.ContentType, ContentEncoding: p.ContentEncoding,
			AbsoluteExpiryTime: timeString(p.AbsoluteExpiryTime), CreationTime: timeString(p.CreationTime),
			GroupID: p.GroupID, GroupSequence: p.GroupSequence, ReplyToGroupID: p.ReplyToGroupID,
		}
		if p.UserID != nil {
			s := fmt.Sprintf("%q", p.UserID)
			r.Properties.UserID = &s
		}
	}
	for k, v := range msg.ApplicationProperties {
		r.ApplicationProperties = append(r.ApplicationProperties, field{Key: k, Type: fmt.Sprintf("%T", v), Value: value(v)})
	}
	sort.Slice(r.ApplicationProperties, func(i, j int) bool { return r.ApplicationProperties[i].Key < r.ApplicationProperties[j].Key })
	switch {
	case msg.Value != nil:
		r.BodyKind = fmt.Sprintf("value %T", msg.Value)
		r.Body = value(msg.Value)
	case msg.Data != nil:
		r.BodyKind = fmt.Sprintf("data x%d", len(msg.Data))
		r.Body = string(bytes.Join(msg.Data, nil))
	case msg.Sequence != nil:
		r.BodyKind = fmt.Sprintf("sequence x%d", len(msg.Sequence))
		r.Body = fmt.Sprint(msg.Sequence)
	default:
		r.BodyKind = "none"
	}

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fixedClock is the publish time the delay cases are computed from.
var fixedClock = time.Date(2025, 6, 5, 14, 12, 7, 250_000_000, time.UTC) // 1749132727250 ms

func withClock(now time.Time) PublishOption {
	return publishOption(func(c *publishConfig) { c.now = func() time.Time { return now } })
}

// contractPHP is CONTRACT.md's order-created envelope as a PHP producer
// wrote it: the cross-SDK conformance input of section 2.
func contractPHP(t *testing.T) *Envelope {
	t.Helper()
	env := mustDecode(t, contractExample)
	env.Meta.Lang = "php"
	return env
}

func mustMessage(t *testing.T, env *Envelope, opts ...PublishOption) *amqp.Message {
	t.Helper()
	msg, err := NewMessage(env, opts...)
	if err != nil {
		t.Fatalf("NewMessage: %v", err)
	}
	return msg
}

// benchOrder is the order-created payload as a publisher's own struct.
type benchOrder struct {
	OrderID  int     `json:"order_id"`
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
	Note     string  `json:"note"`
}

// reported is one call of the error callback.
type reported struct {
	err error
	env *Envelope
	msg *amqp.Message
}

// update rewrites the golden files under testdata/ instead of comparing
// against them. Read every rewritten file against CONTRACT.md before
// committing it: a golden that encodes a bug is worse than none.
var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// mustConsumer is NewConsumer for a configuration the test knows is valid.
func mustConsumer(t testing.TB, h Handlers, opts ...ConsumerOption) *Consumer {
	t.Helper()
	c, err := NewConsumer(h, opts...)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	return c
}

// inWorkers runs work(w) in workers goroutines at once, w from 0, and
// fails t with what any of them returned: each returns at its first error.
func inWorkers(t *testing.T, workers int, work func(w int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			if err := work(w); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
