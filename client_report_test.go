package artemis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

func TestEventCallbackPanicIsContained(t *testing.T) {
	fb := newFakeBroker(t)
	var buf fakelink.LogBuffer
	c, err := newClient([]string{"amqp://babel:" + secret + "@live:5672"}, &ClientOptions{
		OnEvent: func(ev ConnectionEvent) { panic("callback saw " + ev.URL + " " + secret) },
		Logger:  slog.New(slog.NewTextHandler(&buf, nil)),
	}, fb.dial)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.close() })
	_, err = c.connection(context.Background())
	require.NoError(t, err)
	assert.Contains(t, buf.String(), "callback panicked")
	assert.NotContains(t, buf.String(), secret)
}

func TestClientWithoutLoggerOrCallbackLogsFailuresToSlogDefault(t *testing.T) {
	logs := captureDefaultLog(t)
	fb := newFakeBroker(t)
	fb.dialErr = func(_ int, b *broker) error {
		if strings.Contains(b.addr, "live") {
			return refused
		}
		return nil
	}
	c, err := newClient([]string{"amqp://babel:" + secret + "@live.example:5672", "amqp://babel:" + secret + "@backup.example:5672"}, nil, fb.dial)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.close() })
	_, err = c.connection(context.Background())
	require.NoError(t, err, "the live URL is refused, the backup answers")
	fb.conn(0).kill(&amqp.ConnError{})
	// The loss is logged by the goroutine that noticed it, at its own
	// pace; the re-dial's lines follow it once it is in.
	require.Eventually(t, func() bool { return len(logs.lines(t)) == 2 }, 5*time.Second, time.Millisecond, "the loss logged")
	_, err = c.connection(context.Background())
	require.NoError(t, err, "re-dialled: the live URL is refused again, the backup answers")

	lines := logs.lines(t)
	var msgs []string
	for _, l := range lines {
		msgs = append(msgs, l["msg"].(string))
		assert.Equal(t, "WARN", l["level"], "only warn lines go to slog.Default: %v", l)
		assert.NotContains(t, l["error"], secret)
		assert.NotContains(t, l["url"], secret)
	}
	assert.Equal(t, []string{"dial failed", "connection lost", "dial failed"}, msgs)
	require.Len(t, lines, 3)
	assert.Equal(t, "dial_failed", lines[0]["event"])
	assert.Equal(t, "amqp://babel:xxxxx@live.example:5672", lines[0]["url"])
	assert.NotContains(t, lines[0]["msg"], "babelqueue")
}

func TestClientCallbackWithoutLoggerLogsNothing(t *testing.T) {
	logs := captureDefaultLog(t)
	fb := newFakeBroker(t)
	fb.dialErr = func(int, *broker) error { return refused }
	var heard []ConnectionEventKind
	c, err := newClient([]string{"amqp://live.example:5672"}, &ClientOptions{
		OnEvent: func(ev ConnectionEvent) { heard = append(heard, ev.Kind) },
	}, fb.dial)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.close() })
	_, err = c.connection(context.Background())
	require.Error(t, err)
	assert.Equal(t, []ConnectionEventKind{EventDialFailed}, heard)
	assert.Empty(t, logs.String())
}

func TestClientEventLogLines(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	h.fb.conn(0).kill(&amqp.ConnError{})
	_, err := h.b.connection(context.Background())
	require.NoError(t, err)

	var got [][2]string
	for _, l := range jsonLines(t, h.log.String()) {
		got = append(got, [2]string{l["level"].(string), l["msg"].(string)})
	}
	assert.Equal(t, [][2]string{{"INFO", "connected"}, {"WARN", "connection lost"}, {"INFO", "reconnected"}}, got)
}

func TestClientEventCallbackPanicGoesToSlogDefault(t *testing.T) {
	logs := captureDefaultLog(t)
	fb := newFakeBroker(t)
	c, err := newClient([]string{"amqp://babel:" + secret + "@live:5672"}, &ClientOptions{
		OnEvent: func(ev ConnectionEvent) { panic("callback saw " + ev.URL + " " + secret) },
	}, fb.dial)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.close() })
	_, err = c.connection(context.Background())
	require.NoError(t, err)
	lines := logs.lines(t)
	require.Len(t, lines, 1)
	assert.Equal(t, "connection event callback panicked", lines[0]["msg"])
	assert.Equal(t, slog.LevelError.String(), lines[0]["level"])
	assert.NotContains(t, lines[0]["panic"], secret)
}

// A Client's logger whose handler panics (a broken sink; slog.Default()
// when there is no Logger) never ends the goroutine that reports an event:
// the connection watcher reports a loss in the background, where a panic
// would end the process. The line is replaced on slog.Default(), and the
// Client goes on.
func TestClientLoggerThatPanicsNeverEndsTheClientsGoroutines(t *testing.T) {
	for _, h := range []exitingHandler{{panics: true}, {panics: true, enabledPanics: true}} {
		t.Run(fmt.Sprintf("Enabled panics %v", h.enabledPanics), func(t *testing.T) {
			clientLoggerPanics(t, h)
		})
	}
}

func clientLoggerPanics(t *testing.T, h exitingHandler) {
	fallback := captureDefaultLog(t)
	fb := newFakeBroker(t)
	c, err := newClient([]string{"amqp://babel:" + secret + "@live:5672"}, &ClientOptions{
		Logger:  slog.New(h),
		OnEvent: func(ConnectionEvent) { panic("callback bug") },
	}, fb.dial)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.close() })
	_, err = c.connection(context.Background())
	require.NoError(t, err, "the connected line panicked in the dialling goroutine")
	fb.conn(0).kill(&amqp.ConnError{})
	lost := func() bool {
		for _, l := range fallback.lines(t) {
			if l["message"] == "connection lost" {
				return true
			}
		}
		return false
	}
	require.Eventually(t, lost, 5*time.Second, time.Millisecond, "the watcher's line replaced on slog.Default")
	_, err = c.connection(context.Background())
	require.NoError(t, err, "re-dialled after the loss")

	var msgs []string
	for _, l := range fallback.lines(t) {
		assert.Equal(t, "logger panicked", l["msg"])
		assert.Equal(t, "log handler bug", l["panic"])
		msgs = append(msgs, l["message"].(string))
	}
	assert.Contains(t, msgs, "connection lost")
	assert.Contains(t, msgs, "connection event callback panicked", "the callback's panic line, on the same logger")
}
