package artemis

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

func TestNewDeadLetter(t *testing.T) {
	at := fixedClock
	dl := newDeadLetter(ReasonFailed, &OutcomeError{State: &amqp.StateReleased{}}, "orders", 3, at)
	got := string(dl.appendJSON(nil))
	want := `{"reason":"failed","error":"artemis: broker released the transfer","exception":"*artemis.OutcomeError","failed_at":1749132727250,"original_queue":"orders","attempts":3,"lang":"go"}`
	if got != want {
		t.Errorf("block\n got: %s\nwant: %s", got, want)
	}
	// A panic's exception is "panic: " and the type of the panic value.
	dl = newDeadLetter(ReasonFailed, &PanicError{Value: "boom"}, "orders", 1, at)
	if dl.Exception == nil || *dl.Exception != "panic: string" || dl.Error == nil || *dl.Error != "handler panicked: boom" {
		t.Errorf("panic block: %s", dl.appendJSON(nil))
	}
	dl = newDeadLetter(ReasonUnknownURN, nil, "", 0, at)
	if got := string(dl.appendJSON(nil)); got != `{"reason":"unknown_urn","error":null,"exception":null,"failed_at":1749132727250,"original_queue":"","attempts":0,"lang":"go"}` {
		t.Errorf("nil cause block: %s", got)
	}
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
				c := mustConsumer(t, p.handlers, WithOnError(rec.onError), WithDeadLetterSender(dlq),
					WithUnknownURN(p.strategy), WithDeadLetterTimeout(20*time.Millisecond), WithDeadLetterRetryDelay(0))
				got := handleOne(t, c, rec, dlq, p.msg(t))
				assert.Len(t, dlq.Sent(), 1, "exactly one DLQ write per delivery")
				if o.ok {
					assert.Equal(t, fakelink.Accepted, got.disp)
					require.Len(t, got.reports, 1)
					assert.ErrorIs(t, got.reports[0].err, p.kind)
					var de *DeliveryError
					require.ErrorAs(t, got.reports[0].err, &de)
					assert.Equal(t, DispositionDeadLettered, de.Disposition)
					return
				}
				assert.Equal(t, fakelink.Released, got.disp, "a failed DLQ write ends in a plain release, never an accept")
				require.Len(t, got.reports, 1)
				err := got.reports[0].err
				assert.ErrorIs(t, err, ErrDeadLetterFailed)
				var de *DeliveryError
				require.ErrorAs(t, err, &de)
				assert.Equal(t, DispositionReleased, de.Disposition)
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

func TestDeadLetterToPlainSenderTrustsSend(t *testing.T) {
	// A Sender that cannot report outcomes is trusted when Send returns nil;
	// a rejected transfer still errors out of Send.
	rec := newRecorder()
	fs := &fakelink.Sender{Outcome: fakelink.Reject}
	c := mustConsumer(t, Handlers{}, WithOnError(rec.onError), WithDeadLetterSender(fakelink.PlainSender{S: fs}),
		WithUnknownURN(UnknownURNDeadLetter), WithDeadLetterRetryDelay(0))
	got := handleOne(t, c, rec, nil, orderMessage(t, 0))
	assert.Equal(t, fakelink.Released, got.disp)
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
			c := mustConsumer(t, Handlers{}, WithDeadLetterSender(dlq))
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

func TestOriginalQueue(t *testing.T) {
	dlq := &fakelink.Sender{}
	c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("x"))}, WithDeadLetterSender(dlq), WithQueue("billing"))
	got := handleOne(t, c, newRecorder(), dlq, orderMessage(t, 2))
	require.Len(t, got.dlq, 1)
	assert.Equal(t, "billing", dlqEnvelope(t, got.dlq[0]).DeadLetter.OriginalQueue)
	assert.Equal(t, "billing.dlq", *got.dlq[0].Properties.To)
}

func TestUnknownKeysSurviveTheDeadLetterCopy(t *testing.T) {
	body := `{"job":"urn:babel:orders:created","trace_id":"t-1","data":{"big":123456789012345678901234567890,"s":"<é>"},"meta":{"id":"m-1","queue":"orders","lang":"java","schema_version":1,"created_at":1749132727000,"tenant":"acme"},"attempts":1,"x_custom":{"k":[1,2]}}`
	dlq := &fakelink.Sender{}
	c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("x"))}, WithDeadLetterSender(dlq), WithMaxTries(2))
	got := handleOne(t, c, newRecorder(), dlq, rawMessage(body))
	require.Len(t, got.dlq, 1)
	rec := got.dlq[0].Value.(string)
	want := `{"job":"urn:babel:orders:created","trace_id":"t-1","data":{"big":123456789012345678901234567890,"s":"<é>"},"meta":{"id":"m-1","queue":"orders","lang":"java","schema_version":1,"created_at":1749132727000,"tenant":"acme"},"attempts":1,"x_custom":{"k":[1,2]},"dead_letter":{"reason":"failed","error":"x","exception":"error","failed_at":`
	assert.True(t, strings.HasPrefix(rec, want), "got %s", rec)
}

func TestHeadersRideIntoTheDeadLetterCopy(t *testing.T) {
	msg := orderMessage(t, 2, WithHeaders(map[string]string{"traceparent": "00-aa-bb-01"}))
	dlq := &fakelink.Sender{}
	c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("x"))}, WithDeadLetterSender(dlq))
	got := handleOne(t, c, newRecorder(), dlq, msg)
	require.Len(t, got.dlq, 1)
	assert.Equal(t, "00-aa-bb-01", got.dlq[0].ApplicationProperties["traceparent"])
	assert.Equal(t, "2", got.dlq[0].ApplicationProperties[PropAttempts])
}

// (gatewayError, a handler failure with a type of its own, is declared
// beside the consumer's tests.)

// codeError is a value-type error.
type codeError int

func (c codeError) Error() string { return fmt.Sprintf("code %d", int(c)) }

// ownWrapper is an application's own wrapper: a type of its own, so it is
// the name, not what it wraps.
type ownWrapper struct{ err error }

func (w *ownWrapper) Error() string { return "retry later: " + w.err.Error() }
func (w *ownWrapper) Unwrap() error { return w.err }

// boundsPanic is the recovered value of an index out of range.
func boundsPanic() (v any) {
	defer func() { v = recover() }()
	var s []int
	i := 3
	_ = s[i]
	return nil
}

// exceptionCases is the table of dead_letter.exception names (CONTRACT.md
// section 5).
var exceptionCases = []struct {
	name  string
	cause error
	want  string
}{
	{"errors.New", errors.New("boom"), "error"},
	{"fmt.Errorf without %w", fmt.Errorf("boom %d", 1), "error"},
	{"fmt.Errorf over errors.New", fmt.Errorf("charge: %w", errors.New("boom")), "error"},
	{"errors.Join of errors.New", errors.Join(errors.New("a"), errors.New("b")), "error"},
	{"own type", &gatewayError{"payment gateway timeout"}, "*artemis.gatewayError"},
	{"own value type", codeError(7), "artemis.codeError"},
	{"fmt.Errorf over own type", fmt.Errorf("charge: %w", &gatewayError{"payment gateway timeout"}), "*artemis.gatewayError"},
	{"fmt.Errorf twice over own type", fmt.Errorf("order 7: %w", fmt.Errorf("charge: %w", &gatewayError{"payment gateway timeout"})), "*artemis.gatewayError"},
	{"fmt.Errorf with two %w, first anonymous", fmt.Errorf("%w; %w", errors.New("a"), &gatewayError{"payment gateway timeout"}), "*artemis.gatewayError"},
	{"fmt.Errorf with two %w, first named", fmt.Errorf("%w; %w", codeError(1), &gatewayError{"payment gateway timeout"}), "artemis.codeError"},
	{"errors.Join depth first", errors.Join(errors.New("a"), fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: errors.New("refused")}), &gatewayError{"payment gateway timeout"}), "*net.OpError"},
	{"errors.Join inside fmt.Errorf", fmt.Errorf("all: %w", errors.Join(errors.New("a"), &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist})), "*fs.PathError"},
	{"context.DeadlineExceeded", context.DeadlineExceeded, "context.deadlineExceededError"},
	{"wrapped context.DeadlineExceeded", fmt.Errorf("call: %w", context.DeadlineExceeded), "context.deadlineExceededError"},
	{"context.Canceled is an errors.New", fmt.Errorf("call: %w", context.Canceled), "error"},
	{"an application's own wrapper is named", &ownWrapper{err: &gatewayError{"payment gateway timeout"}}, "*artemis.ownWrapper"},
	{"panic with a string", &PanicError{Value: "boom"}, "panic: string"},
	{"panic with an int", &PanicError{Value: 42}, "panic: int"},
	{"panic with an own error", &PanicError{Value: &gatewayError{"payment gateway timeout"}}, "panic: *artemis.gatewayError"},
	{"panic with errors.New", &PanicError{Value: errors.New("boom")}, "panic: error"},
	{"panic with a wrapped own error", &PanicError{Value: fmt.Errorf("x: %w", &gatewayError{"payment gateway timeout"})}, "panic: *artemis.gatewayError"},
	{"panic from the runtime", &PanicError{Value: boundsPanic()}, "panic: runtime.boundsError"},
	{"panic wrapped by fmt.Errorf", fmt.Errorf("handler: %w", &PanicError{Value: "boom"}), "panic: string"},
	{"DeliveryError is looked through", &DeliveryError{Kind: KindHandlerFailed, Err: fmt.Errorf("x: %w", &gatewayError{"payment gateway timeout"})}, "*artemis.gatewayError"},
	{"DeliveryError over errors.New", &DeliveryError{Kind: KindHandlerFailed, Err: errors.New("x")}, "error"},
	{"OutcomeError is a broker outcome of its own", fmt.Errorf("publish: %w", &OutcomeError{State: &amqp.StateRejected{Error: &amqp.Error{Condition: "amqp:not-found"}}}), "*artemis.OutcomeError"},
	{"amqp errors keep their type", fmt.Errorf("publish: %w", &amqp.LinkError{}), "*amqp.LinkError"},
}

func TestExceptionName(t *testing.T) {
	for _, tc := range exceptionCases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, exceptionName(tc.cause))
			dl := newDeadLetter(ReasonFailed, tc.cause, "orders", 2, fixedClock)
			require.NotNil(t, dl.Exception)
			assert.Equal(t, tc.want, *dl.Exception)
			require.NotNil(t, dl.Error)
			assert.Equal(t, tc.cause.Error(), *dl.Error)
		})
	}
}

// The block a consumer writes names the handler's error type, for a
// returned error and for a panic alike, and the library's own reasons
// (poison, unknown URN) carry no exception.
func TestDeadLetterCopyNamesTheHandlersType(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler HandlerFunc
		want    string
	}{
		{"errors.New", failing(errors.New("card declined")), "error"},
		{"wrapped own type", failing(fmt.Errorf("charge order: %w", &gatewayError{"payment gateway timeout"})), "*artemis.gatewayError"},
		{"panic string", func(context.Context, *Envelope, *amqp.Message) error { panic("boom") }, "panic: string"},
		{"panic own error", func(context.Context, *Envelope, *amqp.Message) error { panic(&gatewayError{"payment gateway timeout"}) }, "panic: *artemis.gatewayError"},
		{"panic errors.New", func(context.Context, *Envelope, *amqp.Message) error { panic(errors.New("boom")) }, "panic: error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dlq := &fakelink.Sender{}
			c := mustConsumer(t, Handlers{urnCreated: tc.handler}, WithDeadLetterSender(dlq))
			got := handleOne(t, c, newRecorder(), dlq, orderMessage(t, 2))
			require.Len(t, got.dlq, 1)
			dl := dlqEnvelope(t, got.dlq[0]).DeadLetter
			require.NotNil(t, dl)
			require.NotNil(t, dl.Exception)
			assert.Equal(t, tc.want, *dl.Exception)
			assert.True(t, strings.Contains(got.dlq[0].Value.(string), `"exception":"`+tc.want+`"`))
		})
	}
}

// dlqCopy runs msg through a consumer that dead-letters it and returns the
// DLQ copy the broker was given.
func dlqCopy(t *testing.T, msg *amqp.Message, opts ...ConsumerOption) *amqp.Message {
	t.Helper()
	dlq := &fakelink.Sender{}
	opts = append([]ConsumerOption{WithDeadLetterSender(dlq), WithMaxTries(1), WithQueue("orders")}, opts...)
	cons := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
		return errors.New("gateway down")
	}}, opts...)
	r := fakelink.NewReceiver(t, "orders")
	_ = cons.Handle(context.Background(), r, msg)
	d, ok := r.Disposition(msg)
	require.True(t, ok)
	require.Equal(t, fakelink.Accepted, d, "dead-lettered, then accepted")
	kept := dlq.Kept()
	require.Len(t, kept, 1)
	return kept[0]
}

// redelivered is msg as the broker sends the same stored message again:
// the same properties and application properties, one more delivery.
func redelivered(msg *amqp.Message) *amqp.Message {
	cp := *msg
	h := *msg.Header
	h.DeliveryCount++
	cp.Header = &h
	return &cp
}

func dupID(m *amqp.Message) string {
	s, _ := m.ApplicationProperties[PropDuplicateID].(string)
	return s
}

// A DLQ copy never carries a duplicate id, neither its own nor the
// source's: Artemis drops a transfer whose _AMQ_DUPL_ID is in its cache and
// still answers accepted, so an id shared by two dead-letterings would lose
// the second. A repeated dead-lettering of one stored message (the source's
// accept was lost) is therefore a second visible copy, never a lost one.
func TestADeadLetterCopyHasNoDuplicateID(t *testing.T) {
	gated := func(t *testing.T) *amqp.Message {
		m := orderMessage(t, 0, WithDuplicateDetection())
		m.ApplicationProperties[PropSchemaVersion] = "2"
		return m
	}
	poison := func(*testing.T) *amqp.Message {
		m := rawMessage("{not an envelope")
		m.Properties = &amqp.MessageProperties{MessageID: "foreign-7"}
		m.ApplicationProperties = map[string]any{PropDuplicateID: "foreign-7"}
		return m
	}
	unknown := func(t *testing.T) *amqp.Message {
		env, err := NewEnvelope("urn:babel:orders:nobody", orderData, EnvelopeQueue("orders"))
		require.NoError(t, err)
		m, err := NewMessage(env, WithDuplicateDetection())
		require.NoError(t, err)
		return m
	}
	cases := []struct {
		name string
		msg  func(*testing.T) *amqp.Message
		opts []ConsumerOption
	}{
		{"failed, published with duplicate detection", func(t *testing.T) *amqp.Message { return orderMessage(t, 0, WithDuplicateDetection()) }, nil},
		{"failed, published without", func(t *testing.T) *amqp.Message { return orderMessage(t, 0) }, nil},
		{"unknown URN", unknown, []ConsumerOption{WithUnknownURN(UnknownURNDeadLetter)}},
		{"gated", gated, nil},
		{"poison", poison, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.msg(t)
			srcDup := dupID(src)
			first := dlqCopy(t, src, tc.opts...)
			again := dlqCopy(t, redelivered(src), tc.opts...)

			assert.NotContains(t, first.ApplicationProperties, PropDuplicateID, "no duplicate id on the DLQ copy")
			assert.NotContains(t, again.ApplicationProperties, PropDuplicateID, "nor on a repeated one")
			assert.Equal(t, srcDup, dupID(src), "the source is not modified")
		})
	}
}

func TestARedrivenMessageThatFailsAgainIsANewDeadLettering(t *testing.T) {
	src := orderMessage(t, 0, WithDuplicateDetection())
	first := dlqCopy(t, src)

	// Every SDK's redrive publishes the envelope again as it is (same
	// meta.id and created_at); with or without a duplicate id of its own,
	// the copy of its next failure carries none, so Artemis cannot take it
	// for the first.
	env, err := Decode([]byte(src.Value.(string)))
	require.NoError(t, err)
	for _, opts := range [][]PublishOption{nil, {WithDuplicateDetection()}, {WithHeaders(map[string]string{PropDuplicateID: "redrive-1"})}} {
		again, err := NewMessage(env, opts...)
		require.NoError(t, err)
		require.Equal(t, src.Properties.MessageID, again.Properties.MessageID, "the same meta.id")
		require.Equal(t, src.Properties.CreationTime, again.Properties.CreationTime, "the same created_at")
		second := dlqCopy(t, again)
		assert.NotContains(t, second.ApplicationProperties, PropDuplicateID)
	}
	assert.NotContains(t, first.ApplicationProperties, PropDuplicateID)
}

func TestADeadLetterCopyWithoutAMessageIDHasNoDuplicateID(t *testing.T) {
	m := rawMessage("{not an envelope")
	m.ApplicationProperties = map[string]any{PropDuplicateID: "theirs"}
	cp := dlqCopy(t, m)
	assert.NotContains(t, cp.ApplicationProperties, PropDuplicateID,
		"nothing tells two such messages apart: no duplicate id, and not the source's")
	assert.Equal(t, "theirs", m.ApplicationProperties[PropDuplicateID], "the source is not modified")
}

// A dead-letter write that fails holds the delivery for the retry delay on
// the consumer's clock, then releases it; a consumer that stops ends the
// hold at once. The clock is the test's: the release may come only after it
// fires (or the consumer stops), never before.
func TestDeadLetterFailureHoldsTheDeliveryForTheRetryDelay(t *testing.T) {
	for _, end := range []string{"the clock fires", "the consumer stops"} {
		t.Run(end, func(t *testing.T) {
			rec := newRecorder()
			dlq := &fakelink.Sender{Outcome: fakelink.Reject}
			c := mustConsumer(t, Handlers{}, WithOnError(rec.onError), WithDeadLetterSender(dlq),
				WithUnknownURN(UnknownURNDeadLetter), WithDeadLetterRetryDelay(time.Hour))
			holds := make(chan time.Duration, 1)
			fire := make(chan time.Time)
			c.after = func(d time.Duration) <-chan time.Time {
				holds <- d
				return fire
			}
			r := fakelink.NewReceiver(t, "orders")
			msg := r.Track(orderMessage(t, 0))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Handle(ctx, r, msg) }()

			rep := <-rec.ch // reported before the hold
			assert.ErrorIs(t, rep.err, ErrDeadLetterFailed)
			select {
			case d := <-holds:
				assert.Equal(t, time.Hour, d, "the hold waits the retry delay on the consumer's clock")
			case err := <-done:
				t.Fatalf("the delivery was settled without a hold (%v)", err)
			}
			select {
			case err := <-done:
				t.Fatalf("the delivery was settled before the retry delay (%v)", err)
			default:
			}
			_, settled := r.Disposition(msg)
			assert.False(t, settled, "the delivery stays unsettled during the hold")
			if end == "the clock fires" {
				fire <- time.Time{}
			} else {
				cancel() // the consumer stops: the hold ends at once
			}
			assert.ErrorIs(t, <-done, ErrDeadLetterFailed)
			d, _ := r.Disposition(msg)
			assert.Equal(t, fakelink.Released, d)
		})
	}
}

// TestDeadLetterFailureReportThatExitsStillSettles: the report of a failed
// dead-letter write goes out before the delivery is settled; an error
// callback or a logger that exits the goroutine there (runtime.Goexit, as
// t.FailNow does) or panics does not leave the delivery unsettled: it is
// released, once. A logger's panic is recovered: Handle returns.
func TestDeadLetterFailureReportThatExitsStillSettles(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opt      ConsumerOption
		returned bool
	}{
		{"callback exits", WithOnError(func(context.Context, error, *Envelope, *amqp.Message) { runtime.Goexit() }), false},
		{"logger exits", WithLogger(slog.New(exitingHandler{})), false},
		{"logger panics", WithLogger(slog.New(exitingHandler{panics: true})), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dlq := &fakelink.Sender{Outcome: fakelink.Reject}
			c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("boom"))},
				WithDeadLetterSender(dlq), WithQueue("orders"), WithMaxTries(1), WithDeadLetterRetryDelay(0), tc.opt)
			r := fakelink.NewReceiver(t, "orders")
			msg := r.Track(orderMessage(t, 0))
			done := make(chan any, 1)
			go func() {
				returned := false
				defer func() {
					if !returned {
						done <- recover()
					}
				}()
				_ = c.Handle(context.Background(), r, msg)
				returned = true
				done <- "returned"
			}()
			end := <-done
			if tc.returned {
				assert.Equal(t, "returned", end)
			} else {
				assert.NotEqual(t, "returned", end, "the report ended the goroutine")
			}
			d, ok := r.Disposition(msg)
			require.True(t, ok, "the delivery was settled although the report exited the goroutine")
			assert.Equal(t, fakelink.Released, d)
			assert.Equal(t, 1, r.Settled())
		})
	}
}

// TestDLQAddressSplitsAtTheFirstSeparator: Artemis's fully qualified name
// is address::queue split at the first "::" (its CompositeAddress), so a
// queue name holding "::" or starting with ':' keeps it.
func TestDLQAddressSplitsAtTheFirstSeparator(t *testing.T) {
	assert.Equal(t, "b::c.dlq", dlqAddress("a::b::c"))
	assert.Equal(t, ":q.dlq", dlqAddress("addr:::q"))
	assert.Equal(t, "", dlqAddress("addr::"))
}

// Property names repaired to valid UTF-8 stay distinct: a valid name keeps
// its value, and each invalid name that repairs to a taken one gets a
// suffix, in the byte order of the originals, so no header of the source is
// lost and the copy is the same on every run (whatever the map's order).
func TestRepairedPropertyNamesStayDistinct(t *testing.T) {
	src := &amqp.Message{ApplicationProperties: map[string]any{
		"h\uFFFD":   "valid",
		"h\xff":     "ff",
		"h\xfe":     "fe",
		"h\uFFFD~2": "taken suffix",
		"g\xff":     "alone",
	}}
	want := map[string]string{
		"h\uFFFD":   "valid",
		"h\uFFFD~2": "taken suffix",
		"h\uFFFD~3": "fe", // "h\xfe" sorts before "h\xff"
		"h\uFFFD~4": "ff",
		"g\uFFFD":   "alone",
	}
	for range 50 {
		require.Equal(t, want, stringProperties(src))
		got := map[string]string{}
		for k, v := range forwardCopy(src, "orders").ApplicationProperties {
			got[k] = v.(string)
		}
		require.Equal(t, want, got)
	}
	assert.Len(t, src.ApplicationProperties, 5, "the source is not modified")
	assert.Equal(t, "ff", src.ApplicationProperties["h\xff"])
}
