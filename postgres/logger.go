package postgres

import (
	"context"
	"fmt"
	"log/slog"
)

// guardLogger is l (slog.Default() when nil) behind a handler that
// recovers a panic of l's own handler: the relay's and the inbox's loops
// log from goroutines of their own, where a broken log sink must not end
// the process. A line whose handler panicked is dropped; Enabled then
// reports false.
func guardLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		l = slog.Default()
	}
	return slog.New(guardedHandler{l.Handler()})
}

type guardedHandler struct{ h slog.Handler }

func (g guardedHandler) Enabled(ctx context.Context, level slog.Level) (on bool) {
	defer func() {
		if recover() != nil {
			on = false
		}
	}()
	return g.h.Enabled(ctx, level)
}

func (g guardedHandler) Handle(ctx context.Context, r slog.Record) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("babelqueue/postgres: the log handler panicked: %v", p)
		}
	}()
	return g.h.Handle(ctx, r)
}

func (g guardedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return guardedHandler{g.h.WithAttrs(attrs)}
}

func (g guardedHandler) WithGroup(name string) slog.Handler {
	return guardedHandler{g.h.WithGroup(name)}
}
