// Reporting the Client's events: each one, scrubbed, to the OnEvent
// callback and the Logger, and to the health that Status reads.

package artemis

import (
	"context"
	"fmt"
	"log/slog"
)

// emit reports an event to the callback and the logger, scrubbed, and
// keeps the health Status reports.
func (c *brokerClient) emit(ev ConnectionEvent) {
	ev = c.scrub(ev)
	c.track(ev)
	c.report(ev)
}

// scrub replaces the passwords in ev's URL and error.
func (c *brokerClient) scrub(ev ConnectionEvent) ConnectionEvent {
	ev.URL = c.red.string(ev.URL)
	ev.Err = c.red.error(ev.Err)
	return ev
}

// report logs ev (scrubbed) and hands it to the OnEvent callback. A loss or
// a connection is tracked apart, under c.mu with the change of c.cur it
// reports, so Status follows the connection even when its report comes
// after a later one's.
func (c *brokerClient) report(ev ConnectionEvent) {
	c.log(ev)
	if c.onEvent == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			l := c.logger
			if l == nil {
				l = slog.Default()
			}
			logLine(context.Background(), l, slog.LevelError, "connection event callback panicked",
				slog.String("event", ev.Kind.String()), slog.String("panic", c.red.string(fmt.Sprint(p))))
		}
	}()
	c.onEvent(ev)
}

// logTo returns the logger a line at level goes to, or nil: the Logger
// option; else, without an OnEvent callback either, slog.Default() for
// warn and above; else (the callback is the report) none.
func (c *brokerClient) logTo(ctx context.Context, level slog.Level) *slog.Logger {
	return chooseLogger(ctx, c.logger, c.onEvent != nil, level)
}

func (c *brokerClient) log(ev ConnectionEvent) {
	level := slog.LevelInfo
	switch ev.Kind {
	case EventDisconnected, EventDialFailed, EventConsumerLost, EventPublishRetried:
		level = slog.LevelWarn
	case EventBackoff:
		level = slog.LevelDebug
	}
	ctx := context.Background()
	l := c.logTo(ctx, level)
	if l == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 6)
	attrs = append(attrs, slog.String("event", ev.Kind.String()))
	if ev.URL != "" {
		attrs = append(attrs, slog.String("url", ev.URL))
	}
	if ev.Address != "" {
		attrs = append(attrs, slog.String("address", ev.Address))
	}
	if ev.Kind == EventBackoff {
		attrs = append(attrs, slog.Int("attempt", ev.Attempt), slog.Duration("delay", ev.Delay))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("error", ev.Err.Error()))
	}
	logLine(ctx, l, level, ev.Kind.message(), attrs...)
}
