package main

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/exampletest"
)

func TestDelayed(t *testing.T) {
	const delay = 2 * time.Second
	ex := exampletest.New(t, "ex-delayed")

	text := ex.Run(func(ctx context.Context, w io.Writer) error {
		return run(ctx, config{Config: ex.Config(30 * time.Second), Delay: delay}, w)
	})

	m := regexp.MustCompile(`measured delay: (\S+) \(asked for 2s\)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("the output has no measured delay")
	}
	measured, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	// The delivery time is written in whole milliseconds, from a clock read
	// after the measurement started: never more than 1 ms early.
	if measured < delay-time.Millisecond || measured > delay+10*time.Second {
		t.Errorf("measured delay %v, want about %v", measured, delay)
	}

	// The message without a delay, published second, arrives first.
	first := strings.Index(text, "received "+URNNow)
	second := strings.Index(text, "received "+URNReminder)
	if first < 0 || second < 0 || first > second {
		t.Errorf("want %s received before %s", URNNow, URNReminder)
	}

	if left := ex.Take(ex.Queue); len(left) != 0 {
		t.Errorf("%d messages left on %s, want 0", len(left), ex.Queue)
	}
}
