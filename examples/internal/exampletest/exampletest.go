// Package exampletest is the examples' test harness: the broker from
// ARTEMIS_URL (the test is skipped without it), fresh queue names, a plain
// go-amqp session, and ways to look at a queue: browse it, or take every
// message off it. An Example holds them for one test. Every call is
// bounded in time, and what it opens is closed when the test ends.
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
)

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

// Config is the example's shared configuration for the test: its broker
// and queue, and timeout.
func (e *Example) Config(timeout time.Duration) broker.Config {
	return broker.Config{URL: e.URL, Queue: e.Queue, Timeout: timeout}
}

// Session returns the test's session, opened on first use and closed when
// the test ends.
func (e *Example) Session() *amqp.Session {
	e.t.Helper()
	if e.sess == nil {
		e.sess = Session(e.t, e.URL)
	}
	return e.sess
}

// Purge empties queues when the test ends (see Purge).
func (e *Example) Purge(queues ...string) {
	e.t.Helper()
	Purge(e.t, e.Session(), queues...)
}

// Browse returns copies of every message on queue (see Browse).
func (e *Example) Browse(queue string) []*amqp.Message {
	e.t.Helper()
	return Browse(e.t, e.Session(), queue)
}

// Take consumes every message on queue and returns them (see Take).
func (e *Example) Take(queue string) []*amqp.Message {
	e.t.Helper()
	return Take(e.t, e.Session(), queue)
}

// Run calls run with a context that has no deadline (the example's own
// timeout bounds it) and a fresh output, and fails the test, showing that
// output, when run fails (see Run). It logs the output and returns it.
func (e *Example) Run(run func(ctx context.Context, out io.Writer) error) string {
	e.t.Helper()
	out := Run(e.t, func(w io.Writer) error { return run(context.Background(), w) })
	e.t.Logf("output:\n%s", out)
	return out
}

// OpTimeout bounds one broker operation; the test machine is small and
// shared, so it is generous.
const OpTimeout = 30 * time.Second

// Idle is how long a queue must stay silent before Browse and Take take it
// as read to the end. (go-amqp sends a drain with zero credit, which
// Artemis does not answer, so a drain cannot mark the end.)
const Idle = time.Second

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

// Session dials url and begins a session, both closed when the test ends.
func Session(t testing.TB, url string) *amqp.Session {
	t.Helper()
	conn, s, err := broker.Session(Context(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return s
}

// Send puts msg on queue and fails the test unless the broker accepts it.
func Send(t testing.TB, s *amqp.Session, queue string, msg *amqp.Message) {
	t.Helper()
	ctx := Context(t)
	snd, err := broker.QueueSender(ctx, s, queue)
	if err != nil {
		t.Fatalf("attach a sender to %s: %v", queue, err)
	}
	defer snd.Close(ctx)
	receipt, err := snd.SendWithReceipt(ctx, msg, nil)
	if err != nil {
		t.Fatalf("send to %s: %v", queue, err)
	}
	state, err := receipt.Wait(ctx)
	if err != nil {
		t.Fatalf("send to %s: %v", queue, err)
	}
	if _, ok := state.(*amqp.StateAccepted); !ok {
		t.Fatalf("send to %s: outcome %T, want accepted", queue, state)
	}
}

// Browse returns copies of every message on queue, leaving them there.
func Browse(t testing.TB, s *amqp.Session, queue string) []*amqp.Message {
	t.Helper()
	r, err := broker.BrowseReceiver(Context(t), s, queue)
	if err != nil {
		t.Fatal(err)
	}
	return read(t, r, queue, false)
}

// Take consumes (accepts) every message on queue and returns them.
func Take(t testing.TB, s *amqp.Session, queue string) []*amqp.Message {
	t.Helper()
	r, err := broker.QueueReceiver(Context(t), s, queue, 100)
	if err != nil {
		t.Fatal(err)
	}
	return read(t, r, queue, true)
}

// read returns what r receives until queue is silent for Idle, accepting
// each message when accept is set, and detaches r.
func read(t testing.TB, r *amqp.Receiver, queue string, accept bool) []*amqp.Message {
	t.Helper()
	ctx := Context(t)
	defer r.Close(ctx)
	var msgs []*amqp.Message
	for {
		msg, err := broker.ReceiveOrIdle(ctx, r, Idle)
		if err != nil {
			t.Fatalf("receive from %s: %v", queue, err)
		}
		if msg == nil {
			return msgs
		}
		if accept {
			if err := r.AcceptMessage(ctx, msg); err != nil {
				t.Fatalf("accept on %s: %v", queue, err)
			}
		}
		msgs = append(msgs, msg)
	}
}

// Purge empties queues when the test ends, so a run leaves nothing behind.
func Purge(t testing.TB, s *amqp.Session, queues ...string) {
	t.Cleanup(func() {
		for _, q := range queues {
			Take(t, s, q)
		}
	})
}

// Run calls run with a fresh output and fails the test, showing that
// output, when run fails. It returns the output.
func Run(t testing.TB, run func(out io.Writer) error) string {
	t.Helper()
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	return out.String()
}
