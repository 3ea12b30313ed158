// Package exampletest is the examples' test harness: the broker from
// ARTEMIS_URL (the test is skipped without it), fresh queue names, a plain
// go-amqp session, and ways to look at a queue: browse it, or take every
// message off it. Every call is bounded in time, and what it opens is
// closed when the test ends.
package exampletest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
)

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
			`(eval "$(scripts/artemis start)" from the repository root, then export ARTEMIS_URL)`)
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
	ctx := Context(t)
	conn, err := broker.Dial(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatalf("begin a session: %v", err)
	}
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
	settled := amqp.SenderSettleModeSettled
	return read(t, s, queue, &amqp.ReceiverOptions{
		SourceCapabilities:        []string{"queue"},
		SourceDistributionMode:    amqp.SourceDistributionModeCopy,
		RequestedSenderSettleMode: &settled,
		Credit:                    100,
	}, false)
}

// Take consumes (accepts) every message on queue and returns them.
func Take(t testing.TB, s *amqp.Session, queue string) []*amqp.Message {
	t.Helper()
	return read(t, s, queue, &amqp.ReceiverOptions{SourceCapabilities: []string{"queue"}, Credit: 100}, true)
}

func read(t testing.TB, s *amqp.Session, queue string, opts *amqp.ReceiverOptions, accept bool) []*amqp.Message {
	t.Helper()
	ctx := Context(t)
	r, err := s.NewReceiver(ctx, queue, opts)
	if err != nil {
		t.Fatalf("attach a receiver to %s: %v", queue, err)
	}
	defer r.Close(ctx)
	var msgs []*amqp.Message
	for {
		rctx, cancel := context.WithTimeout(ctx, Idle)
		msg, err := r.Receive(rctx, nil)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return msgs
		}
		if err != nil {
			t.Fatalf("receive from %s: %v", queue, err)
		}
		if accept {
			if err := r.AcceptMessage(ctx, msg); err != nil {
				t.Fatalf("accept on %s: %v", queue, err)
			}
		}
		msgs = append(msgs, msg)
	}
}

// Body returns a message's body as text: an AMQP string or binary value,
// or its data sections.
func Body(msg *amqp.Message) string {
	switch v := msg.Value.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	var b strings.Builder
	for _, d := range msg.Data {
		b.Write(d)
	}
	return b.String()
}

// Purge empties queues when the test ends, so a run leaves nothing behind.
func Purge(t testing.TB, s *amqp.Session, queues ...string) {
	t.Cleanup(func() {
		for _, q := range queues {
			Take(t, s, q)
		}
	})
}
