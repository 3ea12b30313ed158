package artemis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

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
			wantDisp: fakelink.Failed, wantKind: ErrHandlerFailed, wantFinal: DispositionAbandoned},
		{name: "handler fails one below the limit", handlers: Handlers{urnCreated: failing(gwErr)}, withDLQ: true, delivery: 1,
			wantDisp: fakelink.Failed, wantKind: ErrHandlerFailed, wantFinal: DispositionAbandoned},
		{name: "handler fails at the limit with DLQ: dead-lettered then accepted", handlers: Handlers{urnCreated: failing(gwErr)}, withDLQ: true, delivery: 2,
			wantDisp: fakelink.Accepted, wantKind: ErrHandlerFailed, wantFinal: DispositionDeadLettered, wantReason: ReasonFailed},
		{name: "handler fails past the limit with DLQ", handlers: Handlers{urnCreated: failing(gwErr)}, withDLQ: true, delivery: 7,
			wantDisp: fakelink.Accepted, wantKind: ErrHandlerFailed, wantFinal: DispositionDeadLettered, wantReason: ReasonFailed},
		{name: "handler fails at the limit without DLQ: accept (drop), reported", handlers: Handlers{urnCreated: failing(gwErr)}, delivery: 2,
			wantDisp: fakelink.Accepted, wantKind: ErrHandlerFailed, wantFinal: DispositionDropped},
		{name: "unknown URN, fail (default): reported and modified", handlers: Handlers{}, withDLQ: true,
			wantDisp: fakelink.Failed, wantKind: ErrUnknownURN, wantFinal: DispositionAbandoned},
		{name: "unknown URN, release: modified, nothing reported", handlers: Handlers{}, strategy: UnknownURNRelease, withDLQ: true,
			wantDisp: fakelink.Failed},
		{name: "unknown URN, delete: accept", handlers: Handlers{}, strategy: UnknownURNDelete, withDLQ: true,
			wantDisp: fakelink.Accepted},
		{name: "unknown URN, dead_letter: DLQ copy then accept", handlers: Handlers{}, strategy: UnknownURNDeadLetter, withDLQ: true, delivery: 1,
			wantDisp: fakelink.Accepted, wantKind: ErrUnknownURN, wantFinal: DispositionDeadLettered, wantReason: ReasonUnknownURN},
		{name: "unknown URN, dead_letter without DLQ sender: accept (drop), reported", handlers: Handlers{}, strategy: UnknownURNDeadLetter,
			wantDisp: fakelink.Accepted, wantKind: ErrUnknownURN, wantFinal: DispositionDropped},
		{name: "unknown URN, fail, garbage body: routed on the annotation, never decoded", handlers: Handlers{}, withDLQ: true,
			msg: func(t *testing.T, dc uint32) *amqp.Message {
				m := orderMessage(t, dc)
				m.Value = "not json at all"
				return m
			},
			wantDisp: fakelink.Failed, wantKind: ErrUnknownURN, wantFinal: DispositionAbandoned},
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
			c := mustConsumer(t, tt.handlers, opts...)
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

func TestSettlementFailureIsReported(t *testing.T) {
	rec := newRecorder()
	c := mustConsumer(t, Handlers{urnCreated: succeeding}, WithOnError(rec.onError))
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
	c2 := mustConsumer(t, Handlers{urnCreated: failing(errors.New("x"))}, WithOnError(rec2.onError))
	msg2 := r.Track(orderMessage(t, 0))
	err = c2.Handle(context.Background(), r, msg2)
	assert.ErrorIs(t, err, ErrHandlerFailed)
	assert.ErrorIs(t, err, ErrSettlement)
	require.Len(t, rec2.all(), 2)
	var de *DeliveryError
	require.ErrorAs(t, rec2.all()[0].err, &de)
	assert.Equal(t, DispositionPending, de.Disposition)
}

func TestErrorCallbackPanicIsContained(t *testing.T) {
	c := mustConsumer(t, Handlers{}, WithOnError(func(context.Context, error, *Envelope, *amqp.Message) { panic("callback bug") }))
	got := handleOne(t, c, newRecorder(), nil, orderMessage(t, 0))
	assert.Equal(t, fakelink.Failed, got.disp)
}

// lockedBuffer is a bytes.Buffer safe for the handlers' goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines decodes the JSON lines written so far, but for the warnings of
// receipts nobody waited on: slog.Default is the process's, and another
// test's receipts, resolved late on goroutines of their own, may log that
// to it while a test captures it (captureDefaultLog). String has them all.
func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	all := jsonLines(t, l.String())
	own := all[:0]
	for _, m := range all {
		if m["msg"] != unwaitedReceiptMsg {
			own = append(own, m)
		}
	}
	return own
}

const unwaitedReceiptMsg = "publish not confirmed, receipt not waited on"

// jsonLines decodes slog's JSON lines.
func jsonLines(t *testing.T, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "log line %q", line)
		out = append(out, m)
	}
	return out
}

// captureDefaultLog points slog.Default() at a JSON buffer that takes every
// level, and restores the previous default when the test ends. Tests that
// use it must not run in parallel.
func captureDefaultLog(t *testing.T) *lockedBuffer {
	t.Helper()
	buf := &lockedBuffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return buf
}

func jsonLogger(buf *lockedBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestWithoutLoggerOrCallbackLossesGoToSlogDefault(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name  string
		h     Handlers
		opts  []ConsumerOption
		msg   func(t *testing.T) *amqp.Message
		fail  error // the receiver's settlement error
		level string
		want  string // "": nothing logged
	}{
		{name: "accepted: nothing, not even at debug", h: Handlers{urnCreated: succeeding}},
		{name: "unknown URN released by the strategy: nothing", h: Handlers{}, opts: []ConsumerOption{WithUnknownURN(UnknownURNRelease)}},
		{name: "retry", h: Handlers{urnCreated: failing(boom)},
			level: "WARN", want: "handler failed, retrying"},
		{name: "dropped after the last try", h: Handlers{urnCreated: failing(boom)},
			msg:   func(t *testing.T) *amqp.Message { return orderMessage(t, 2) },
			level: "ERROR", want: "handler failed, dropped"},
		{name: "dead-lettered", h: Handlers{urnCreated: failing(boom)}, opts: []ConsumerOption{WithDeadLetterSender(&fakelink.Sender{})},
			msg:   func(t *testing.T) *amqp.Message { return orderMessage(t, 2) },
			level: "WARN", want: "handler failed, dead-lettered"},
		{name: "poison dropped", h: Handlers{urnCreated: succeeding},
			msg:   func(*testing.T) *amqp.Message { return rawMessage("{not json") },
			level: "ERROR", want: "poison message, dropped"},
		{name: "poison dead-lettered", h: Handlers{urnCreated: succeeding}, opts: []ConsumerOption{WithDeadLetterSender(&fakelink.Sender{})},
			msg:   func(*testing.T) *amqp.Message { return rawMessage("{not json") },
			level: "WARN", want: "poison message, dead-lettered"},
		{name: "unknown URN dropped", h: Handlers{}, opts: []ConsumerOption{WithUnknownURN(UnknownURNDeadLetter)},
			level: "ERROR", want: "no handler for the URN, dropped"},
		{name: "dead-letter write failed", h: Handlers{urnCreated: failing(boom)},
			opts: []ConsumerOption{WithDeadLetterSender(&fakelink.Sender{Outcome: fakelink.Reject}), WithDeadLetterRetryDelay(0)},
			msg:  func(t *testing.T) *amqp.Message { return orderMessage(t, 2) },
			// The report goes out before the hold and the release.
			level: "ERROR", want: "dead-letter write failed, releasing"},
		{name: "settlement failed", h: Handlers{urnCreated: succeeding}, fail: fakelink.ErrLinkClosed,
			level: "ERROR", want: "settlement failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := captureDefaultLog(t)
			c := mustConsumer(t, tc.h, tc.opts...)
			msg := orderMessage(t, 0)
			if tc.msg != nil {
				msg = tc.msg(t)
			}
			r := fakelink.NewReceiver(t, "orders")
			r.SettleErr = tc.fail
			r.Track(msg)
			_ = c.Handle(context.Background(), r, msg)

			lines := logs.lines(t)
			if tc.want == "" {
				assert.Empty(t, lines)
				return
			}
			require.NotEmpty(t, lines)
			assert.Equal(t, tc.want, lines[0]["msg"])
			assert.Equal(t, tc.level, lines[0]["level"])
			for _, l := range lines {
				assert.NotContains(t, l["msg"], "babelqueue:", "no prefix in the message")
				assert.NotEqual(t, "DEBUG", l["level"], "slog.Default gets no debug lines")
			}
		})
	}
}

func TestCallbackWithoutLoggerLogsNothing(t *testing.T) {
	logs := captureDefaultLog(t)
	rec := newRecorder()
	c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("boom"))}, WithOnError(rec.onError))
	got := handleOne(t, c, rec, nil, orderMessage(t, 2))
	assert.Equal(t, fakelink.Accepted, got.disp, "dropped")
	assert.Len(t, got.reports, 1, "the callback is the report")
	assert.Empty(t, logs.String(), "nothing logged")
}

func TestCallbackPanicIsLoggedToSlogDefault(t *testing.T) {
	logs := captureDefaultLog(t)
	c := mustConsumer(t, Handlers{}, WithOnError(func(context.Context, error, *Envelope, *amqp.Message) { panic("callback bug") }))
	got := handleOne(t, c, newRecorder(), nil, orderMessage(t, 0))
	assert.Equal(t, fakelink.Failed, got.disp)
	lines := logs.lines(t)
	require.Len(t, lines, 1, "only the panic: the callback was set")
	assert.Equal(t, "error callback panicked", lines[0]["msg"])
	assert.Equal(t, "callback bug", lines[0]["panic"])
}

func TestPublishObserverPanicIsLoggedToSlogDefault(t *testing.T) {
	logs := captureDefaultLog(t)
	p := NewPublisher(&fakelink.Sender{}, "orders", WithObserver(panicking{}))
	_, err := p.Publish(context.Background(), Job(urnCreated, nil))
	require.NoError(t, err)
	lines := logs.lines(t)
	require.Len(t, lines, 1)
	assert.Equal(t, "publish observer panicked", lines[0]["msg"])
	assert.Equal(t, "ERROR", lines[0]["level"])
}

func TestWithLoggerReplacesSlogDefault(t *testing.T) {
	def := captureDefaultLog(t)
	own := &lockedBuffer{}
	c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("Payment gateway timeout"))},
		WithLogger(jsonLogger(own)), WithQueue("orders"))
	msg := orderMessage(t, 1)
	got := handleOne(t, c, newRecorder(), nil, msg)
	assert.Equal(t, fakelink.Failed, got.disp)
	assert.Empty(t, def.String(), "slog.Default hears nothing once WithLogger is set")

	lines := own.lines(t)
	require.Len(t, lines, 1)
	l := lines[0]
	// The whole line: a fixed message, the facts as attributes, the cause
	// alone as the error.
	delete(l, "time")
	assert.Equal(t, map[string]any{
		"level":       "WARN",
		"msg":         "handler failed, retrying",
		"queue":       "orders",
		"urn":         urnCreated,
		"message_id":  msg.Properties.MessageID,
		"trace_id":    testTrace,
		"attempts":    1.0,
		"disposition": "abandoned",
		"error":       "Payment gateway timeout",
	}, l)

	// Success is a debug line, to the logger only.
	ok := mustConsumer(t, Handlers{urnCreated: succeeding}, WithLogger(jsonLogger(own)))
	handleOne(t, ok, newRecorder(), nil, orderMessage(t, 0))
	lines = own.lines(t)
	require.Len(t, lines, 2)
	assert.Equal(t, "DEBUG", lines[1]["level"])
	assert.Equal(t, "settled", lines[1]["msg"])
	assert.Equal(t, "accepted", lines[1]["disposition"])
	assert.NotContains(t, lines[1], "error")
}

func TestFailedAttemptAndFailedSettlementAreBothLogged(t *testing.T) {
	logs := captureDefaultLog(t)
	c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("boom"))})
	r := fakelink.NewReceiver(t, "orders")
	r.SettleErr = fakelink.ErrLinkClosed
	msg := r.Track(orderMessage(t, 0))
	_ = c.Handle(context.Background(), r, msg)
	lines := logs.lines(t)
	require.Len(t, lines, 2)
	assert.Equal(t, "handler failed, not settled", lines[0]["msg"])
	assert.Equal(t, "boom", lines[0]["error"])
	assert.Equal(t, "settlement failed", lines[1]["msg"])
	assert.Equal(t, fakelink.ErrLinkClosed.Error(), lines[1]["error"])
	assert.Equal(t, "pending", lines[1]["disposition"])
}

// exitingHandler is a slog.Handler whose every line exits the goroutine
// (as a t.FailNow in a test's log handler would), or panics; with
// enabledPanics, its Enabled method panics too.
type exitingHandler struct{ panics, enabledPanics bool }

func (h exitingHandler) Enabled(context.Context, slog.Level) bool {
	if h.enabledPanics {
		panic("log handler bug")
	}
	return true
}
func (h exitingHandler) Handle(context.Context, slog.Record) error {
	if h.panics {
		panic("log handler bug")
	}
	runtime.Goexit()
	return nil
}
func (h exitingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h exitingHandler) WithGroup(string) slog.Handler      { return h }

// brokenError is a handler's error whose Error method panics or, with
// exits, exits the goroutine (runtime.Goexit).
type brokenError struct{ exits bool }

func (e *brokenError) Error() string {
	if e.exits {
		runtime.Goexit()
	}
	panic("Error method bug")
}

// handleOnItsOwn runs Handle on a goroutine of its own and says how that
// goroutine ended: "returned", "exited" (runtime.Goexit) or "panicked".
func handleOnItsOwn(c *Consumer, r Receiver, msg *amqp.Message) string {
	done := make(chan string, 1)
	go func() {
		returned := false
		defer func() {
			if p := recover(); p != nil {
				done <- "panicked"
			} else if !returned {
				done <- "exited"
			}
		}()
		_ = c.Handle(context.Background(), r, msg)
		returned = true
		done <- "returned"
	}()
	return <-done
}

// TestHandlerErrorWhoseErrorMethodBreaksIsSettledOnce: a handler's error
// whose Error method panics or exits the goroutine is read on the way to
// the settlement (the dead-letter block, the log line): the delivery is
// settled once, as the same failed attempt with a working Error would be,
// and a panic does not leave Handle.
func TestHandlerErrorWhoseErrorMethodBreaksIsSettledOnce(t *testing.T) {
	for _, exits := range []bool{false, true} {
		wantEnd := "returned"
		if exits {
			wantEnd = "exited" // the goroutine goes on exiting, as for a handler's Goexit
		}
		for _, tc := range []struct {
			name   string
			opts   []ConsumerOption
			want   fakelink.Disposition
			copies int
		}{
			{"retried", nil, fakelink.Failed, 0},
			{"dead-lettered", []ConsumerOption{WithMaxTries(1)}, fakelink.Accepted, 1},
			{"dropped", []ConsumerOption{WithMaxTries(1), WithDeadLetterSender(nil)}, fakelink.Accepted, 0},
		} {
			t.Run(fmt.Sprintf("%s/exits=%t", tc.name, exits), func(t *testing.T) {
				var logs lockedBuffer
				dlq := &fakelink.Sender{}
				opts := append([]ConsumerOption{WithQueue("orders"), WithDeadLetterSender(dlq), WithLogger(jsonLogger(&logs))}, tc.opts...)
				c := mustConsumer(t, Handlers{urnCreated: failing(&brokenError{exits: exits})}, opts...)
				r := fakelink.NewReceiver(t, "orders")
				msg := r.Track(orderMessage(t, 0))
				assert.Equal(t, wantEnd, handleOnItsOwn(c, r, msg))
				d, ok := r.Disposition(msg)
				require.True(t, ok, "the delivery was not settled")
				assert.Equal(t, tc.want, d)
				assert.Equal(t, 1, r.Settled())
				require.Len(t, dlq.Kept(), tc.copies)
				if tc.copies == 1 {
					env := dlqEnvelope(t, dlq.Kept()[0])
					require.NotNil(t, env.DeadLetter.Error)
					assert.Contains(t, *env.DeadLetter.Error, "*artemis.brokenError")
					assert.Equal(t, "*artemis.brokenError", *env.DeadLetter.Exception)
				}
				lines := logs.lines(t)
				require.NotEmpty(t, lines, "the failed attempt was not logged")
				assert.Contains(t, lines[0]["error"], "*artemis.brokenError")
			})
		}
	}
}

// TestLoggerOrObserverThatBreaksNeverChangesTheSettlement: a logger (the
// WithLogger one, or slog.Default()) or an observer that panics or exits
// the goroutine while a delivery is reported: the delivery is settled once
// with the outcome it had, and a panic does not leave Handle.
func TestLoggerOrObserverThatBreaksNeverChangesTheSettlement(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []ConsumerOption
		dflt    bool // the breaking logger is slog.Default()
		handler HandlerFunc
		want    fakelink.Disposition
		end     string
	}{
		{"logger panics on settled", []ConsumerOption{WithLogger(slog.New(exitingHandler{panics: true}))}, false, succeeding, fakelink.Accepted, "returned"},
		{"logger exits on settled", []ConsumerOption{WithLogger(slog.New(exitingHandler{}))}, false, succeeding, fakelink.Accepted, "exited"},
		{"logger panics on a failure", []ConsumerOption{WithLogger(slog.New(exitingHandler{panics: true}))}, false, failing(errors.New("boom")), fakelink.Failed, "returned"},
		{"logger exits on a failure", []ConsumerOption{WithLogger(slog.New(exitingHandler{}))}, false, failing(errors.New("boom")), fakelink.Failed, "exited"},
		{"default logger panics on a failure", nil, true, failing(errors.New("boom")), fakelink.Failed, "returned"},
		{"default logger panics on dead-lettering", []ConsumerOption{WithMaxTries(1)}, true, failing(errors.New("boom")), fakelink.Accepted, "returned"},
		{"observer panics, logger panics", []ConsumerOption{WithObserver(panicking{}), WithLogger(slog.New(exitingHandler{panics: true}))}, false, succeeding, fakelink.Accepted, "returned"},
		{"observer panics, default logger panics", []ConsumerOption{WithObserver(panicking{})}, true, succeeding, fakelink.Accepted, "returned"},
		{"observer exits", []ConsumerOption{WithObserver(exitingObserver{})}, false, succeeding, fakelink.Accepted, "exited"},
		{"observer exits on a failure", []ConsumerOption{WithObserver(exitingObserver{})}, false, failing(errors.New("boom")), fakelink.Failed, "exited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fallback *lockedBuffer
			if tc.dflt {
				prev := slog.Default()
				slog.SetDefault(slog.New(exitingHandler{panics: true}))
				t.Cleanup(func() { slog.SetDefault(prev) })
			} else {
				fallback = captureDefaultLog(t)
			}
			dlq := &fakelink.Sender{}
			opts := append([]ConsumerOption{WithQueue("orders"), WithDeadLetterSender(dlq)}, tc.opts...)
			c := mustConsumer(t, Handlers{urnCreated: tc.handler}, opts...)
			r := fakelink.NewReceiver(t, "orders")
			msg := r.Track(orderMessage(t, 0))
			assert.Equal(t, tc.end, handleOnItsOwn(c, r, msg))
			d, ok := r.Disposition(msg)
			require.True(t, ok, "the delivery was not settled")
			assert.Equal(t, tc.want, d)
			assert.Equal(t, 1, r.Settled())
			if fallback != nil && strings.HasPrefix(tc.name, "logger panics") {
				// The line the logger lost, replaced on slog.Default().
				lines := fallback.lines(t)
				require.NotEmpty(t, lines)
				assert.Equal(t, "logger panicked", lines[0]["msg"])
				assert.Equal(t, "log handler bug", lines[0]["panic"])
			}
		})
	}
}

// exitingObserver exits the goroutine on every event.
type exitingObserver struct{}

func (exitingObserver) Settled(SettleEvent)    { runtime.Goexit() }
func (exitingObserver) Published(PublishEvent) { runtime.Goexit() }
