package artemis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

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

// lines decodes the JSON lines written so far.
func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	return jsonLines(t, l.String())
}

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
	p := NewPublisher(&fakelink.Sender{}, "orders", WithPublishObserver(panicking{}))
	_, err := p.Publish(context.Background(), urnCreated, nil)
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

func TestGiveBackFailureIsLogged(t *testing.T) {
	logs := captureDefaultLog(t)
	c := mustConsumer(t, Handlers{urnCreated: succeeding})
	r := fakelink.NewReceiver(t, "orders")
	r.SettleErr = fakelink.ErrLinkClosed
	msg := r.Track(orderMessage(t, 0))
	c.giveBack(context.Background(), r, msg)
	lines := logs.lines(t)
	require.Len(t, lines, 1)
	assert.Equal(t, "settlement failed", lines[0]["msg"])
	assert.Equal(t, "orders", lines[0]["queue"])
	assert.Equal(t, urnCreated, lines[0]["urn"])
}
