// Package exampletest is the examples' test harness: an Example holds one
// test's broker (ARTEMIS_URL; the test is skipped without it), a fresh
// queue name, a plain go-amqp session, and ways to look at a queue: browse
// it, or take every message off it. Every call is bounded in time, and
// what it opens is closed when the test ends.
package exampletest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

// OpTimeout bounds one broker operation; the test machine is small and
// shared, so it is generous.
const OpTimeout = 30 * time.Second

// Idle is how long a queue must stay silent before Browse and Take take it
// as read to the end. (go-amqp sends a drain with zero credit, which
// Artemis does not answer, so a drain cannot mark the end.)
const Idle = time.Second

// Example is one example test's broker: ARTEMIS_URL and a fresh queue,
// with a session, opened on first use, to look at queues.
type Example struct {
	t     testing.TB
	URL   string
	Queue string
	sess  *amqp.Session
}

// New returns the test's Example with a fresh queue that starts with
// prefix, or skips the test when ARTEMIS_URL is not set.
func New(t testing.TB, prefix string) *Example {
	t.Helper()
	return &Example{t: t, URL: URL(t), Queue: Queue(t, prefix)}
}

// URL returns ARTEMIS_URL, or skips the test when it is not set.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("ARTEMIS_URL")
	if u == "" {
		t.Skip("skipped: this example test needs a broker; set ARTEMIS_URL " +
			`(eval "$(scripts/artemis start)" from the repository root: it exports ARTEMIS_URL)`)
	}
	return u
}

// Queue returns a fresh queue name that starts with prefix.
func Queue(t testing.TB, prefix string) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

// Context returns a context bounded by OpTimeout.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), OpTimeout)
	t.Cleanup(cancel)
	return ctx
}

// Config is the example's shared configuration for the test: its broker
// and queue, and timeout.
func (e *Example) Config(timeout time.Duration) broker.Config {
	return broker.Config{URL: e.URL, Queue: e.Queue, Timeout: timeout}
}

// Run calls run with a context that has no deadline (the example's own
// timeout bounds it) and a fresh output, and fails the test, showing that
// output, when run fails. It logs the output and returns it.
func (e *Example) Run(run func(ctx context.Context, out io.Writer) error) string {
	e.t.Helper()
	var out strings.Builder
	if err := run(context.Background(), &out); err != nil {
		e.t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	e.t.Logf("output:\n%s", out.String())
	return out.String()
}

// Session returns the test's session on the broker, dialled on first use;
// the connection is closed when the test ends.
func (e *Example) Session() *amqp.Session {
	e.t.Helper()
	if e.sess == nil {
		conn, s, err := broker.Session(Context(e.t), e.URL)
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { _ = conn.Close() })
		e.sess = s
	}
	return e.sess
}

// Browse returns copies of every message on queue, leaving them there.
func (e *Example) Browse(queue string) []*amqp.Message {
	e.t.Helper()
	r, err := queuelink.Browser(Context(e.t), e.Session(), queue)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.read(r, queue, false)
}

// Take consumes (accepts) every message on queue and returns them.
func (e *Example) Take(queue string) []*amqp.Message {
	e.t.Helper()
	r, err := queuelink.Receiver(Context(e.t), e.Session(), queue, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.read(r, queue, true)
}

// read returns what r receives until queue is silent for Idle, accepting
// each message when accept is set, and detaches r.
func (e *Example) read(r *amqp.Receiver, queue string, accept bool) []*amqp.Message {
	e.t.Helper()
	ctx := Context(e.t)
	defer r.Close(ctx)
	var msgs []*amqp.Message
	for {
		msg, err := queuelink.ReceiveOrIdle(ctx, r, Idle)
		if err != nil {
			e.t.Fatalf("receive from %s: %v", queue, err)
		}
		if msg == nil {
			return msgs
		}
		if accept {
			if err := r.AcceptMessage(ctx, msg); err != nil {
				e.t.Fatalf("accept on %s: %v", queue, err)
			}
		}
		msgs = append(msgs, msg)
	}
}

// Purge empties queues when the test ends, so a run leaves nothing behind.
func (e *Example) Purge(queues ...string) {
	e.t.Helper()
	e.Session() // dialled now, so it is closed after the purge
	e.t.Cleanup(func() {
		for _, q := range queues {
			e.Take(q)
		}
	})
}
