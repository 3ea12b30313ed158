package artemis

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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

const (
	urnCreated = "urn:babel:orders:created"
	testTrace  = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"
)

// reported is one call of the error callback.
type reported struct {
	err error
	env *Envelope
	msg *amqp.Message
}

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

func TestSettlementTable(t *testing.T) {
	gwErr := &gatewayError{"Payment gateway timeout"}
	tests := []struct {
		name       string
		handlers   Handlers
		strategy   UnknownURNStrategy
		withDLQ    bool
		delivery   uint32
		msg        func(t *testing.T, dc uint32) *amqp.Message
		wantDisp   fakelink.Disposition
		wantKind   error // nil: nothing reported
		wantFinal  Disposition
		wantReason string // a DLQ copy with this reason
	}{
		{name: "handler returns nil: accept", handlers: Handlers{urnCreated: succeeding}, withDLQ: true,
			wantDisp: fakelink.Accepted},
		{name: "handler fails below the limit: modified delivery-failed", handlers: Handlers{urnCreated: failing(gwErr)}, withDLQ: true,
			wantDisp: fakelink.Failed, wantKind: ErrHandlerFailed, wantFinal: Abandoned},
		{name: "handler fails one below the limit", handlers: Handlers{urnCreated: failing(gwErr)}, withDLQ: true, delivery: 1,
			wantDisp: fakelink.Failed, wantKind: ErrHandlerFailed, wantFinal: Abandoned},
		{name: "handler fails at the limit with DLQ: dead-lettered then accepted", handlers: Handlers{urnCreated: failing(gwErr)}, withDLQ: true, delivery: 2,
			wantDisp: fakelink.Accepted, wantKind: ErrHandlerFailed, wantFinal: DeadLettered, wantReason: ReasonFailed},
		{name: "handler fails past the limit with DLQ", handlers: Handlers{urnCreated: failing(gwErr)}, withDLQ: true, delivery: 7,
			wantDisp: fakelink.Accepted, wantKind: ErrHandlerFailed, wantFinal: DeadLettered, wantReason: ReasonFailed},
		{name: "handler fails at the limit without DLQ: accept (drop), reported", handlers: Handlers{urnCreated: failing(gwErr)}, delivery: 2,
			wantDisp: fakelink.Accepted, wantKind: ErrHandlerFailed, wantFinal: Dropped},
		{name: "unknown URN, fail (default): reported and modified", handlers: Handlers{}, withDLQ: true,
			wantDisp: fakelink.Failed, wantKind: ErrUnknownURN, wantFinal: Abandoned},
		{name: "unknown URN, release: modified, nothing reported", handlers: Handlers{}, strategy: UnknownURNRelease, withDLQ: true,
			wantDisp: fakelink.Failed},
		{name: "unknown URN, delete: accept", handlers: Handlers{}, strategy: UnknownURNDelete, withDLQ: true,
			wantDisp: fakelink.Accepted},
		{name: "unknown URN, dead_letter: DLQ copy then accept", handlers: Handlers{}, strategy: UnknownURNDeadLetter, withDLQ: true, delivery: 1,
			wantDisp: fakelink.Accepted, wantKind: ErrUnknownURN, wantFinal: DeadLettered, wantReason: ReasonUnknownURN},
		{name: "unknown URN, dead_letter without DLQ sender: accept (drop), reported", handlers: Handlers{}, strategy: UnknownURNDeadLetter,
			wantDisp: fakelink.Accepted, wantKind: ErrUnknownURN, wantFinal: Dropped},
		{name: "unknown URN, fail, garbage body: routed on the annotation, never decoded", handlers: Handlers{}, withDLQ: true,
			msg: func(t *testing.T, dc uint32) *amqp.Message {
				m := orderMessage(t, dc)
				m.Value = "not json at all"
				return m
			},
			wantDisp: fakelink.Failed, wantKind: ErrUnknownURN, wantFinal: Abandoned},
		{name: "unknown URN, delete, garbage body: accept without decoding", handlers: Handlers{}, strategy: UnknownURNDelete, withDLQ: true,
			msg: func(t *testing.T, dc uint32) *amqp.Message {
				m := orderMessage(t, dc)
				m.Value = "not json at all"
				return m
			},
			wantDisp: fakelink.Accepted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			dlq := &fakelink.Sender{}
			opts := []ConsumerOption{WithOnError(rec.onError)}
			if tt.withDLQ {
				opts = append(opts, WithDeadLetterSender(dlq))
			}
			if tt.strategy != "" {
				opts = append(opts, WithUnknownURN(tt.strategy))
			}
			c := NewConsumer(tt.handlers, opts...)
			var msg *amqp.Message
			if tt.msg != nil {
				msg = tt.msg(t, tt.delivery)
			} else {
				msg = orderMessage(t, tt.delivery)
			}
			got := handleOne(t, c, rec, dlq, msg)
			assert.Equal(t, tt.wantDisp, got.disp)
			if tt.wantKind == nil {
				assert.Empty(t, got.reports)
				assert.NoError(t, got.ret)
			} else {
				require.Len(t, got.reports, 1)
				err := got.reports[0].err
				assert.ErrorIs(t, err, tt.wantKind)
				assert.ErrorIs(t, got.ret, tt.wantKind)
				var de *DeliveryError
				require.ErrorAs(t, err, &de)
				assert.Equal(t, tt.wantFinal, de.Disposition)
				assert.Equal(t, urnCreated, de.URN)
				assert.Same(t, msg, got.reports[0].msg)
				if errors.Is(tt.wantKind, ErrHandlerFailed) {
					var gw *gatewayError
					assert.ErrorAs(t, err, &gw, "the handler's own error is reachable")
					assert.Equal(t, int(tt.delivery), de.Attempts)
				}
			}
			if tt.wantReason == "" {
				assert.Empty(t, got.dlq, "nothing may be written to the DLQ")
				return
			}
			require.Len(t, got.dlq, 1)
			dm := got.dlq[0]
			env := dlqEnvelope(t, dm)
			assert.Equal(t, tt.wantReason, env.DeadLetter.Reason)
			assert.Equal(t, "orders", env.DeadLetter.OriginalQueue)
			assert.Equal(t, int(tt.delivery), env.DeadLetter.Attempts)
			assert.Equal(t, int(tt.delivery), env.Attempts, "the copy carries the reconciled attempts")
			assert.Equal(t, "go", env.DeadLetter.Lang)
			assert.Equal(t, testTrace, env.TraceID)
			assert.Equal(t, `{"order_id":1042}`, string(env.Data))
			assert.Equal(t, "orders.dlq", *dm.Properties.To)
			assert.Equal(t, urnCreated, dm.Annotations[AnnotationJMSType], "the copy carries the section 2 projection")
			assert.Equal(t, testTrace, dm.Properties.CorrelationID)
			assert.Equal(t, fmt.Sprint(tt.delivery), dm.ApplicationProperties[PropAttempts])
			assert.True(t, dm.Header.Durable)
			if tt.wantReason == ReasonFailed {
				require.NotNil(t, env.DeadLetter.Error)
				assert.Equal(t, "Payment gateway timeout", *env.DeadLetter.Error)
				require.NotNil(t, env.DeadLetter.Exception)
				assert.Equal(t, "*artemis.gatewayError", *env.DeadLetter.Exception)
			}
		})
	}
}

func TestHandlerPanicIsAFailedAttempt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value any
	}{{"string", "kaboom"}, {"error", errors.New("bad state")}, {"nil", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			dlq := &fakelink.Sender{}
			c := NewConsumer(Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
				panic(tc.value)
			}}, WithOnError(rec.onError), WithDeadLetterSender(dlq))

			got := handleOne(t, c, rec, dlq, orderMessage(t, 0))
			assert.Equal(t, fakelink.Failed, got.disp)
			require.Len(t, got.reports, 1)
			var pe *PanicError
			require.ErrorAs(t, got.reports[0].err, &pe)
			assert.NotEmpty(t, pe.Stack)

			// At the limit the panic dead-letters like an error.
			rec2 := newRecorder()
			c2 := NewConsumer(Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
				panic(tc.value)
			}}, WithOnError(rec2.onError), WithDeadLetterSender(dlq))
			got = handleOne(t, c2, rec2, dlq, orderMessage(t, 2))
			assert.Equal(t, fakelink.Accepted, got.disp)
			require.Len(t, got.dlq, 1)
			env := dlqEnvelope(t, got.dlq[0])
			require.NotNil(t, env.DeadLetter.Error)
			assert.Contains(t, *env.DeadLetter.Error, "panicked")
		})
	}
}

func TestHandlerSeesReconciledAttemptsAndHeaders(t *testing.T) {
	cases := []struct {
		body  int
		dc    uint32
		want  int
		label string
	}{{0, 0, 0, "(0,0)"}, {0, 2, 2, "(0,2)"}, {2, 5, 5, "(2,5)"}, {5, 1, 5, "(5,1)"}, {4, 0, 4, "(4,0)"}, {3, 3, 3, "(3,3)"}}
	for _, tc := range cases {
		t.Run(tc.label, func(t *testing.T) {
			env, err := NewEnvelope(urnCreated, nil, EnvelopeTraceID(testTrace))
			require.NoError(t, err)
			env.Attempts = tc.body
			msg, err := NewMessage(env, WithHeaders(map[string]string{"traceparent": "00-abc-def-01"}))
			require.NoError(t, err)
			msg.Header.DeliveryCount = tc.dc
			var seen int
			var headers HeaderCarrier
			var raw *amqp.Message
			c := NewConsumer(Handlers{urnCreated: func(ctx context.Context, e *Envelope, m *amqp.Message) error {
				seen, headers, raw = e.Attempts, HeadersFromContext(ctx), MessageFromContext(ctx)
				return nil
			}}, WithMaxTries(100))
			got := handleOne(t, c, newRecorder(), nil, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			assert.Equal(t, tc.want, seen)
			assert.Equal(t, "00-abc-def-01", headers.Get("traceparent"))
			assert.Equal(t, "babelqueue", headers.Get(PropAppID))
			assert.Same(t, msg, raw)
		})
	}
}

func TestRouting(t *testing.T) {
	t.Run("the annotation wins over the body URN", func(t *testing.T) {
		msg := orderMessage(t, 0)
		msg.Annotations[AnnotationJMSType] = "urn:babel:orders:shipped"
		var got string
		c := NewConsumer(Handlers{
			"urn:babel:orders:shipped": func(_ context.Context, e *Envelope, _ *amqp.Message) error { got = "shipped:" + e.URN(); return nil },
			urnCreated:                 func(context.Context, *Envelope, *amqp.Message) error { got = "created"; return nil },
		})
		handleOne(t, c, newRecorder(), nil, msg)
		assert.Equal(t, "shipped:"+urnCreated, got)
	})
	t.Run("the subject routes when the annotation is absent (a JMS producer's JMSType)", func(t *testing.T) {
		msg := orderMessage(t, 0)
		delete(msg.Annotations, AnnotationJMSType)
		shipped := "urn:babel:orders:shipped"
		msg.Properties.Subject = &shipped
		var got string
		c := NewConsumer(Handlers{
			shipped:    func(context.Context, *Envelope, *amqp.Message) error { got = "shipped"; return nil },
			urnCreated: func(context.Context, *Envelope, *amqp.Message) error { got = "created"; return nil },
		})
		handleOne(t, c, newRecorder(), nil, msg)
		assert.Equal(t, "shipped", got)
	})
	for name, ann := range map[string]any{"absent": nil, "blank": "  ", "not a string": int64(7), "binary": []byte(urnCreated)} {
		t.Run("falls back to the body URN when the annotation is "+name, func(t *testing.T) {
			msg := orderMessage(t, 0)
			msg.Properties.Subject = nil
			if ann == nil {
				delete(msg.Annotations, AnnotationJMSType)
			} else {
				msg.Annotations[AnnotationJMSType] = ann
			}
			called := false
			c := NewConsumer(Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error { called = true; return nil }})
			got := handleOne(t, c, newRecorder(), nil, msg)
			assert.True(t, called)
			assert.Equal(t, fakelink.Accepted, got.disp)
		})
	}
	t.Run("the urn alias routes when job is absent", func(t *testing.T) {
		msg := rawMessage(`{"urn":"urn:babel:orders:created","trace_id":"t-1","data":{},"meta":{"id":"m-1","queue":"orders","lang":"node","schema_version":1,"created_at":1},"attempts":0}`)
		var job string
		c := NewConsumer(Handlers{urnCreated: func(_ context.Context, e *Envelope, _ *amqp.Message) error { job = e.Job; return nil }})
		got := handleOne(t, c, newRecorder(), nil, msg)
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Equal(t, urnCreated, job)
	})
	t.Run("binary and data-section bodies decode", func(t *testing.T) {
		for _, mk := range []func(string) *amqp.Message{
			func(s string) *amqp.Message { return &amqp.Message{Value: []byte(s)} },
			func(s string) *amqp.Message { return &amqp.Message{Data: [][]byte{[]byte(s)}} },
			func(s string) *amqp.Message { return &amqp.Message{Data: [][]byte{[]byte(s[:10]), []byte(s[10:])}} },
		} {
			body := orderMessage(t, 0).Value.(string)
			called := false
			c := NewConsumer(Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error { called = true; return nil }})
			got := handleOne(t, c, newRecorder(), nil, mk(body))
			assert.True(t, called)
			assert.Equal(t, fakelink.Accepted, got.disp)
		}
	})
}

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

func TestDeadLetterWriteMustBeAccepted(t *testing.T) {
	paths := []struct {
		name     string
		handlers Handlers
		strategy UnknownURNStrategy
		msg      func(t *testing.T) *amqp.Message
		kind     error
	}{
		{"failed at the limit", Handlers{urnCreated: failing(errors.New("boom"))}, UnknownURNFail,
			func(t *testing.T) *amqp.Message { return orderMessage(t, 2) }, ErrHandlerFailed},
		{"unknown URN", Handlers{}, UnknownURNDeadLetter,
			func(t *testing.T) *amqp.Message { return orderMessage(t, 0) }, ErrUnknownURN},
		{"poison", Handlers{urnCreated: succeeding}, UnknownURNFail,
			func(*testing.T) *amqp.Message { return rawMessage("not json") }, ErrPoison},
		{"gated", Handlers{urnCreated: succeeding}, UnknownURNFail,
			func(t *testing.T) *amqp.Message {
				m := orderMessage(t, 0)
				m.ApplicationProperties[PropSchemaVersion] = "2"
				return m
			}, ErrVersionGated},
	}
	for _, p := range paths {
		for _, o := range dlqOutcomes {
			t.Run(p.name+"/"+o.name, func(t *testing.T) {
				rec := newRecorder()
				dlq := &fakelink.Sender{Outcome: o.outcome}
				c := NewConsumer(p.handlers, WithOnError(rec.onError), WithDeadLetterSender(dlq),
					WithUnknownURN(p.strategy), WithDeadLetterTimeout(20*time.Millisecond), WithDeadLetterRetryDelay(0))
				got := handleOne(t, c, rec, dlq, p.msg(t))
				assert.Len(t, dlq.Sent(), 1, "exactly one DLQ write per delivery")
				if o.ok {
					assert.Equal(t, fakelink.Accepted, got.disp)
					require.Len(t, got.reports, 1)
					assert.ErrorIs(t, got.reports[0].err, p.kind)
					var de *DeliveryError
					require.ErrorAs(t, got.reports[0].err, &de)
					assert.Equal(t, DeadLettered, de.Disposition)
					return
				}
				assert.Equal(t, fakelink.Released, got.disp, "a failed DLQ write ends in a plain release, never an accept")
				require.Len(t, got.reports, 1)
				err := got.reports[0].err
				assert.ErrorIs(t, err, ErrDeadLetterFailed)
				var de *DeliveryError
				require.ErrorAs(t, err, &de)
				assert.Equal(t, Released, de.Disposition)
				switch o.name {
				case "timed out":
					assert.Contains(t, err.Error(), "no outcome within 20ms")
					assert.ErrorIs(t, err, context.DeadlineExceeded)
				case "link closed":
					var le *amqp.LinkError
					assert.ErrorAs(t, err, &le)
				default:
					assert.ErrorIs(t, err, ErrNotAccepted)
					var oe *OutcomeError
					assert.ErrorAs(t, err, &oe)
				}
			})
		}
	}
}

func TestDeadLetterFailureHoldsTheDeliveryForTheRetryDelay(t *testing.T) {
	rec := newRecorder()
	dlq := &fakelink.Sender{Outcome: fakelink.Reject}
	c := NewConsumer(Handlers{}, WithOnError(rec.onError), WithDeadLetterSender(dlq),
		WithUnknownURN(UnknownURNDeadLetter), WithDeadLetterRetryDelay(time.Hour))
	r := fakelink.NewReceiver(t, "orders")
	msg := r.Track(orderMessage(t, 0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Handle(ctx, r, msg) }()

	rep := <-rec.ch // reported before the hold
	assert.ErrorIs(t, rep.err, ErrDeadLetterFailed)
	select {
	case err := <-done:
		t.Fatalf("the delivery was settled before the retry delay (%v)", err)
	case <-time.After(20 * time.Millisecond):
	}
	_, settled := r.Disposition(msg)
	assert.False(t, settled, "the delivery stays unsettled during the hold")
	cancel() // the consumer stops: the hold ends at once
	assert.ErrorIs(t, <-done, ErrDeadLetterFailed)
	d, _ := r.Disposition(msg)
	assert.Equal(t, fakelink.Released, d)
}

func TestDeadLetterToPlainSenderTrustsSend(t *testing.T) {
	// A Sender that cannot report outcomes is trusted when Send returns nil;
	// a rejected transfer still errors out of Send.
	rec := newRecorder()
	fs := &fakelink.Sender{Outcome: fakelink.Reject}
	c := NewConsumer(Handlers{}, WithOnError(rec.onError), WithDeadLetterSender(fakelink.PlainSender{S: fs}),
		WithUnknownURN(UnknownURNDeadLetter), WithDeadLetterRetryDelay(0))
	got := handleOne(t, c, rec, nil, orderMessage(t, 0))
	assert.Equal(t, fakelink.Released, got.disp)
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

func TestVersionGate(t *testing.T) {
	strategies := []UnknownURNStrategy{UnknownURNFail, UnknownURNRelease, UnknownURNDelete, UnknownURNDeadLetter}
	for _, gv := range gateValues {
		for _, strategy := range strategies {
			for _, withDLQ := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s/dlq=%t", gv.name, strategy, withDLQ)
				t.Run(name, func(t *testing.T) {
					msg := orderMessage(t, 0)
					if gv.set {
						msg.ApplicationProperties[PropSchemaVersion] = gv.value
					} else {
						delete(msg.ApplicationProperties, PropSchemaVersion)
					}
					handled := false
					rec := newRecorder()
					dlq := &fakelink.Sender{}
					opts := []ConsumerOption{WithOnError(rec.onError), WithUnknownURN(strategy)}
					if withDLQ {
						opts = append(opts, WithDeadLetterSender(dlq))
					}
					c := NewConsumer(Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
						handled = true
						return nil
					}}, opts...)
					got := handleOne(t, c, rec, dlq, msg)
					assert.Equal(t, fakelink.Accepted, got.disp, "settled on its first delivery, never released")
					if !gv.gated {
						assert.True(t, handled)
						assert.Empty(t, got.reports)
						return
					}
					assert.False(t, handled, "a gated message never reaches a handler")
					require.Len(t, got.reports, 1)
					assert.ErrorIs(t, got.reports[0].err, ErrVersionGated)
					assert.Nil(t, got.reports[0].env, "a gated body is never decoded")
					var de *DeliveryError
					require.ErrorAs(t, got.reports[0].err, &de)
					if strategy == UnknownURNDelete || !withDLQ {
						assert.Equal(t, Dropped, de.Disposition)
						assert.Empty(t, got.dlq)
						return
					}
					assert.Equal(t, DeadLettered, de.Disposition)
					require.Len(t, got.dlq, 1)
					fwd := got.dlq[0]
					assert.Equal(t, msg.Value, fwd.Value, "forwarded byte for byte")
					assert.NotContains(t, fwd.Value, "dead_letter")
					assert.Equal(t, gv.value, fwd.ApplicationProperties[PropSchemaVersion])
					assert.Equal(t, "orders.dlq", *fwd.Properties.To)
				})
			}
		}
	}
}

func TestGatedBinaryBodyStaysBinary(t *testing.T) {
	body := []byte{0xff, 0x00, '{', '}'}
	for name, msg := range map[string]*amqp.Message{
		"data section": {Data: [][]byte{body}, ApplicationProperties: map[string]any{PropSchemaVersion: "2"}},
		"binary value": {Value: body, ApplicationProperties: map[string]any{PropSchemaVersion: "2"}},
		"sequence":     {Sequence: [][]any{{"a", int64(1)}}, ApplicationProperties: map[string]any{PropSchemaVersion: "2"}},
	} {
		t.Run(name, func(t *testing.T) {
			dlq := &fakelink.Sender{}
			c := NewConsumer(Handlers{}, WithDeadLetterSender(dlq))
			got := handleOne(t, c, newRecorder(), dlq, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			require.Len(t, got.dlq, 1)
			assert.Equal(t, msg.Data, got.dlq[0].Data)
			assert.Equal(t, msg.Value, got.dlq[0].Value)
			assert.Equal(t, msg.Sequence, got.dlq[0].Sequence)
		})
	}
}

func TestForwardCopyDropsScheduling(t *testing.T) {
	msg := orderMessage(t, 3, WithDelay(time.Hour))
	msg.ApplicationProperties[PropSchemaVersion] = "2"
	msg.Annotations[AnnotationDeliveryDelay] = int64(5000)
	fwd := forwardCopy(msg, "orders")
	assert.NotContains(t, fwd.Annotations, AnnotationDeliveryTime)
	assert.NotContains(t, fwd.Annotations, AnnotationDeliveryDelay)
	assert.Equal(t, urnCreated, fwd.Annotations[AnnotationJMSType])
	assert.Equal(t, uint32(0), fwd.Header.DeliveryCount)
	assert.True(t, fwd.Header.Durable)
	assert.Contains(t, msg.Annotations, AnnotationDeliveryTime, "the source message is not modified")
}

func TestPoisonThroughHandle(t *testing.T) {
	bodies := []struct {
		name   string
		msg    *amqp.Message
		prefix string // the record starts with this
	}{
		{"not json", rawMessage("hello <world>"), `{"raw":"hello <world>","dead_letter":{"reason":"poison"`},
		{"json array", rawMessage(`[1,2]`), `{"raw":"[1,2]","dead_letter":`},
		{"object that is not an envelope", rawMessage(`{"a":1}`), `{"a":1,"dead_letter":{"reason":"poison"`},
		{"empty object", rawMessage(`{}`), `{"dead_letter":{"reason":"poison"`},
		{"schema version 2 in the body", rawMessage(`{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"schema_version":2},"attempts":0}`),
			`{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"schema_version":2},"attempts":0,"dead_letter":`},
		{"invalid utf-8", &amqp.Message{Value: []byte{0xff, 0xfe, 'x'}}, `{"raw":"//54","raw_encoding":"base64","dead_letter":`},
		{"empty body", &amqp.Message{}, `{"raw":"","dead_letter":`},
		{"empty data section", &amqp.Message{Data: [][]byte{{}}}, `{"raw":"","dead_letter":`},
		{"sequence body", &amqp.Message{Sequence: [][]any{{"x"}}}, `{"raw":"[[x]]","dead_letter":`},
		{"int value", &amqp.Message{Value: int64(5)}, `{"raw":"5","dead_letter":`},
		{"null job", rawMessage(`{"job":null,"trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`), `{"job":null`},
	}
	for _, b := range bodies {
		t.Run(b.name, func(t *testing.T) {
			rec := newRecorder()
			dlq := &fakelink.Sender{}
			c := NewConsumer(Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
				t.Error("a poison message reached a handler")
				return nil
			}}, WithOnError(rec.onError), WithDeadLetterSender(dlq))
			got := handleOne(t, c, rec, dlq, b.msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			require.Len(t, got.reports, 1)
			assert.ErrorIs(t, got.reports[0].err, ErrPoison)
			require.Len(t, got.dlq, 1)
			rec0 := got.dlq[0].Value.(string)
			assert.True(t, strings.HasPrefix(rec0, b.prefix), "record %s", rec0)
			var parsed struct {
				DeadLetter DeadLetter `json:"dead_letter"`
			}
			require.NoError(t, json.Unmarshal([]byte(rec0), &parsed))
			assert.Equal(t, ReasonPoison, parsed.DeadLetter.Reason)
			assert.Equal(t, "orders", parsed.DeadLetter.OriginalQueue)
			assert.NotNil(t, parsed.DeadLetter.Error)
			assert.Nil(t, parsed.DeadLetter.Exception)
		})
	}
	t.Run("delete strategy drops poison, reported", func(t *testing.T) {
		rec := newRecorder()
		dlq := &fakelink.Sender{}
		c := NewConsumer(Handlers{}, WithOnError(rec.onError), WithDeadLetterSender(dlq), WithUnknownURN(UnknownURNDelete))
		got := handleOne(t, c, rec, dlq, rawMessage("nope"))
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Empty(t, got.dlq)
		require.Len(t, got.reports, 1)
		assert.ErrorIs(t, got.reports[0].err, ErrPoison)
	})
	t.Run("no DLQ sender drops poison, reported", func(t *testing.T) {
		rec := newRecorder()
		c := NewConsumer(Handlers{}, WithOnError(rec.onError))
		got := handleOne(t, c, rec, nil, rawMessage("nope"))
		assert.Equal(t, fakelink.Accepted, got.disp)
		require.Len(t, got.reports, 1)
		var de *DeliveryError
		require.ErrorAs(t, got.reports[0].err, &de)
		assert.Equal(t, Dropped, de.Disposition)
	})
	t.Run("poison is never retried, whatever the delivery count", func(t *testing.T) {
		m := rawMessage("nope")
		m.Header.DeliveryCount = 0
		dlq := &fakelink.Sender{}
		c := NewConsumer(Handlers{}, WithDeadLetterSender(dlq), WithMaxTries(10))
		got := handleOne(t, c, newRecorder(), dlq, m)
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Len(t, got.dlq, 1)
	})
}

func TestOriginalQueue(t *testing.T) {
	dlq := &fakelink.Sender{}
	c := NewConsumer(Handlers{urnCreated: failing(errors.New("x"))}, WithDeadLetterSender(dlq), WithQueue("billing"))
	got := handleOne(t, c, newRecorder(), dlq, orderMessage(t, 2))
	require.Len(t, got.dlq, 1)
	assert.Equal(t, "billing", dlqEnvelope(t, got.dlq[0]).DeadLetter.OriginalQueue)
	assert.Equal(t, "billing.dlq", *got.dlq[0].Properties.To)
}

func TestUnknownKeysSurviveTheDeadLetterCopy(t *testing.T) {
	body := `{"job":"urn:babel:orders:created","trace_id":"t-1","data":{"big":123456789012345678901234567890,"s":"<é>"},"meta":{"id":"m-1","queue":"orders","lang":"java","schema_version":1,"created_at":1749132727000,"tenant":"acme"},"attempts":1,"x_custom":{"k":[1,2]}}`
	dlq := &fakelink.Sender{}
	c := NewConsumer(Handlers{urnCreated: failing(errors.New("x"))}, WithDeadLetterSender(dlq), WithMaxTries(2))
	got := handleOne(t, c, newRecorder(), dlq, rawMessage(body))
	require.Len(t, got.dlq, 1)
	rec := got.dlq[0].Value.(string)
	want := `{"job":"urn:babel:orders:created","trace_id":"t-1","data":{"big":123456789012345678901234567890,"s":"<é>"},"meta":{"id":"m-1","queue":"orders","lang":"java","schema_version":1,"created_at":1749132727000,"tenant":"acme"},"attempts":1,"x_custom":{"k":[1,2]},"dead_letter":{"reason":"failed","error":"x","exception":"*errors.errorString","failed_at":`
	assert.True(t, strings.HasPrefix(rec, want), "got %s", rec)
}

func TestHeadersRideIntoTheDeadLetterCopy(t *testing.T) {
	msg := orderMessage(t, 2, WithHeaders(map[string]string{"traceparent": "00-aa-bb-01"}))
	dlq := &fakelink.Sender{}
	c := NewConsumer(Handlers{urnCreated: failing(errors.New("x"))}, WithDeadLetterSender(dlq))
	got := handleOne(t, c, newRecorder(), dlq, msg)
	require.Len(t, got.dlq, 1)
	assert.Equal(t, "00-aa-bb-01", got.dlq[0].ApplicationProperties["traceparent"])
	assert.Equal(t, "2", got.dlq[0].ApplicationProperties[PropAttempts])
}

func TestSettlementFailureIsReported(t *testing.T) {
	rec := newRecorder()
	c := NewConsumer(Handlers{urnCreated: succeeding}, WithOnError(rec.onError))
	r := fakelink.NewReceiver(t, "orders")
	r.SettleErr = &amqp.LinkError{}
	msg := r.Track(orderMessage(t, 0))
	err := c.Handle(context.Background(), r, msg)
	assert.ErrorIs(t, err, ErrSettlement)
	var le *amqp.LinkError
	assert.ErrorAs(t, err, &le)
	require.Len(t, rec.all(), 1)
	assert.ErrorIs(t, rec.all()[0].err, ErrSettlement)

	// A failed attempt whose modify cannot be sent: both are reported.
	rec2 := newRecorder()
	c2 := NewConsumer(Handlers{urnCreated: failing(errors.New("x"))}, WithOnError(rec2.onError))
	msg2 := r.Track(orderMessage(t, 0))
	err = c2.Handle(context.Background(), r, msg2)
	assert.ErrorIs(t, err, ErrHandlerFailed)
	assert.ErrorIs(t, err, ErrSettlement)
	require.Len(t, rec2.all(), 2)
	var de *DeliveryError
	require.ErrorAs(t, rec2.all()[0].err, &de)
	assert.Equal(t, Pending, de.Disposition)
}

func TestErrorCallbackPanicIsContained(t *testing.T) {
	c := NewConsumer(Handlers{}, WithOnError(func(context.Context, error, *Envelope, *amqp.Message) { panic("callback bug") }))
	got := handleOne(t, c, newRecorder(), nil, orderMessage(t, 0))
	assert.Equal(t, fakelink.Failed, got.disp)
}

func TestInvalidConfig(t *testing.T) {
	cases := map[string][]ConsumerOption{
		"max tries 0":     {WithMaxTries(0)},
		"concurrency 0":   {WithConcurrency(0)},
		"timeout 0":       {WithDeadLetterTimeout(0)},
		"negative delay":  {WithDeadLetterRetryDelay(-time.Second)},
		"strategy":        {WithUnknownURN("ignore")},
		"nil handler map": nil,
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			h := Handlers{urnCreated: succeeding}
			if opts == nil {
				h = Handlers{urnCreated: nil}
			}
			c := NewConsumer(h, opts...)
			r := fakelink.NewReceiver(t, "orders")
			assert.ErrorIs(t, c.Listen(context.Background(), r), ErrInvalidConfig)
			msg := r.Track(orderMessage(t, 0))
			assert.ErrorIs(t, c.Handle(context.Background(), r, msg), ErrInvalidConfig)
			d, _ := r.Disposition(msg)
			assert.Equal(t, fakelink.Released, d, "nothing is lost to a bad configuration")
		})
	}
}

func TestListenKeepsOrderWithOneWorker(t *testing.T) {
	r := fakelink.NewReceiver(t, "orders")
	const n = 50
	for i := 0; i < n; i++ {
		m := orderMessage(t, 0)
		m.ApplicationProperties["seq"] = fmt.Sprint(i)
		r.Push(m)
	}
	var mu sync.Mutex
	var order []string
	ctx, cancel := context.WithCancel(context.Background())
	c := NewConsumer(Handlers{urnCreated: func(ctx context.Context, _ *Envelope, _ *amqp.Message) error {
		mu.Lock()
		order = append(order, HeadersFromContext(ctx).Get("seq"))
		mu.Unlock()
		return nil
	}})
	done := make(chan error, 1)
	go func() { done <- c.Listen(ctx, r) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	require.NoError(t, r.WaitSettled(wctx, n))
	cancel()
	require.NoError(t, <-done)
	for i, s := range order {
		assert.Equal(t, fmt.Sprint(i), s)
	}
}

func TestListenConcurrentWorkers(t *testing.T) {
	r := fakelink.NewReceiver(t, "orders")
	const workers = 4
	for i := 0; i < workers*3; i++ {
		r.Push(orderMessage(t, 0))
	}
	var mu sync.Mutex
	running, peak := 0, 0
	gate := make(chan struct{})
	started := make(chan struct{}, workers*3)
	c := NewConsumer(Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
		mu.Lock()
		running++
		if running > peak {
			peak = running
		}
		mu.Unlock()
		started <- struct{}{}
		<-gate
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}}, WithConcurrency(workers))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Listen(ctx, r) }()
	for i := 0; i < workers; i++ {
		<-started
	}
	close(gate)
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	require.NoError(t, r.WaitSettled(wctx, workers*3))
	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, workers, peak)
	for _, d := range r.Dispositions() {
		assert.Equal(t, fakelink.Accepted, d)
	}
}

func TestListenShutdownFinishesInFlightAndReleasesTheRest(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			r := fakelink.NewReceiver(t, "orders")
			for i := 0; i < 10; i++ {
				r.Push(orderMessage(t, 0))
			}
			started := make(chan struct{}, 10)
			release := make(chan struct{})
			var handlerCtxErr error
			var mu sync.Mutex
			c := NewConsumer(Handlers{urnCreated: func(ctx context.Context, _ *Envelope, _ *amqp.Message) error {
				started <- struct{}{}
				<-release
				mu.Lock()
				handlerCtxErr = ctx.Err()
				mu.Unlock()
				return nil
			}}, WithConcurrency(workers))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Listen(ctx, r) }()
			for i := 0; i < workers; i++ {
				<-started
			}
			cancel()
			select {
			case err := <-done:
				t.Fatalf("Listen returned (%v) before the in-flight handlers finished", err)
			case <-time.After(20 * time.Millisecond):
			}
			close(release)
			require.NoError(t, <-done)
			mu.Lock()
			assert.NoError(t, handlerCtxErr, "in-flight handlers are not cancelled by shutdown")
			mu.Unlock()
			accepted, released := 0, 0
			for _, d := range r.Dispositions() {
				switch d {
				case fakelink.Accepted:
					accepted++
				case fakelink.Released:
					released++
				default:
					t.Errorf("unexpected disposition %v", d)
				}
			}
			assert.Equal(t, workers, accepted, "exactly the in-flight messages were handled")
			// Taken but not started: the one the loop holds and, with
			// several workers, the hand-off buffer (one per worker).
			limit := 1
			if workers > 1 {
				limit += workers
			}
			assert.LessOrEqual(t, released, limit, "at most the messages taken but not started are released")
			assert.Equal(t, 10, accepted+released+r.Queued(), "every message is accounted for")
		})
	}
}

func TestListenReturnsLinkFailure(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			r := fakelink.NewReceiver(t, "orders")
			r.Push(orderMessage(t, 0))
			c := NewConsumer(Handlers{urnCreated: succeeding}, WithConcurrency(workers))
			wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer wcancel()
			go func() {
				_ = r.WaitSettled(wctx, 1)
				r.Fail(&amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced, Description: "broker going away"}})
			}()
			err := c.Listen(context.Background(), r)
			require.Error(t, err)
			var le *amqp.LinkError
			assert.ErrorAs(t, err, &le)
			assert.Contains(t, err.Error(), "babelqueue: receive")
			assert.Equal(t, 1, r.Settled())
		})
	}
}
