package postgres

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// panickingHandler is a broken log sink: Handle panics, and Enabled too
// when enabledPanics is set. calls counts the lines it was asked about.
type panickingHandler struct {
	enabledPanics bool
	calls         *atomic.Int32
}

func (h panickingHandler) Enabled(context.Context, slog.Level) bool {
	if h.calls != nil {
		h.calls.Add(1)
	}
	if h.enabledPanics {
		panic("log sink: Enabled")
	}
	return true
}
func (panickingHandler) Handle(context.Context, slog.Record) error { panic("log sink: Handle") }
func (h panickingHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h panickingHandler) WithGroup(string) slog.Handler           { return h }

// A relay whose Logger panics keeps running its rounds: here every round
// fails (no database answers) and is logged, and Run still ends with its
// ctx instead of taking the process down.
func TestRelayWithAPanickingLoggerKeepsRunning(t *testing.T) {
	for _, enabledPanics := range []bool{false, true} {
		cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
		require.NoError(t, err)
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		var lines atomic.Int32
		relay := NewRelay(pool, nil, &RelayOptions{
			Logger:       slog.New(panickingHandler{enabledPanics: enabledPanics, calls: &lines}),
			PollInterval: time.Millisecond,
			Backoff:      func(int) time.Duration { return time.Millisecond },
		})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err = relay.Run(ctx)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Greater(t, lines.Load(), int32(1), "rounds went on failing, and logging, after the first")
	}
}

// The guarded logger drops the line whose handler panicked, and keeps
// what it was given: attributes, groups.
func TestGuardLogger(t *testing.T) {
	l := guardLogger(slog.New(panickingHandler{enabledPanics: true}))
	assert.False(t, l.Enabled(context.Background(), slog.LevelError))
	assert.NotPanics(t, func() { l.With("k", "v").WithGroup("g").Error("x") })
	assert.NotNil(t, guardLogger(nil), "slog.Default() behind the guard")
}
