package integration_test

// A transfer cut between its frames, on a real broker: a message larger than
// the broker's max frame size (so it goes as several transfer frames) and
// larger than Artemis' large-message threshold (so the broker writes a
// large-message file as the frames come). Cut by the publish's ctx, the
// broker never enqueues it, the library reports ctx's error, the messages
// before and after arrive, and the broker deletes the partial file. Cut by a
// connection reset, the broker never enqueues it either and deletes its file.
//
// Where ctx ends in the transfer depends on timing, so the test searches for
// the moment: it cancels ctx after a delay that grows from 1 ms until a
// publish failed with ctx's error while the broker was seen writing the
// large-message file. A publish that ended before ctx did (whole, or whole
// on the wire with its outcome unknown) is drained and the search goes on.
// The large-message files the broker held before the test are left out of
// every check, so a file of another test or run cannot fail it.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// cutSize is the large message's padding: far above Artemis' AMQP frame size
// (128 KiB) and large-message threshold (100 KiB), so the transfer takes
// long enough for ctx to end while its frames are written.
const cutSize = 8 << 20

// dialVia dials the broker through url (the proxy's) and begins a session.
func dialVia(t *testing.T, b *brokertest.Broker, proxied string) *brokertest.Conn {
	t.Helper()
	via := *b
	via.URL = proxied
	return via.Dial(t)
}

// largeMessages lists the broker instance's large-message files. It skips
// the test when the instance's directory is unknown (a broker of the user's
// own, not started by scripts/test, which exports ARTEMIS_INSTANCE_DIR).
func largeMessages(t *testing.T, b *brokertest.Broker) map[string]bool {
	t.Helper()
	if b.InstanceDir == "" {
		t.Skip("needs ARTEMIS_INSTANCE_DIR to see the broker's large-message files")
	}
	entries, err := os.ReadDir(filepath.Join(b.InstanceDir, "data", "large-messages"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names
}

// newFiles returns the names in now that were not in before.
func newFiles(before, now map[string]bool) []string {
	var added []string
	for name := range now {
		if !before[name] {
			added = append(added, name)
		}
	}
	return added
}

// noNewLargeMessage waits (bounded) until the broker holds no large-message
// file beyond those of before: the test's queue holds no large message, so
// any new file is a partial transfer's.
func noNewLargeMessage(t *testing.T, b *brokertest.Broker, before map[string]bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		added := newFiles(before, largeMessages(t, b))
		if len(added) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker kept large-message files of the cut transfer: %v", added)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// watchLargeMessages polls the broker's large-message directory until stop
// is called, which reports whether a file beyond those of before was ever
// seen there: the witness that the broker had begun writing the cut message
// (so the test of its deletion is not empty).
func watchLargeMessages(t *testing.T, b *brokertest.Broker, before map[string]bool) (stop func() bool) {
	t.Helper()
	dir := filepath.Join(b.InstanceDir, "data", "large-messages")
	done := make(chan struct{})
	seen := make(chan bool, 1)
	go func() {
		saw := false
		for {
			if entries, err := os.ReadDir(dir); err == nil {
				for _, e := range entries {
					saw = saw || !before[e.Name()]
				}
			}
			select {
			case <-done:
				seen <- saw
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() bool {
		close(done)
		return <-seen
	}
}

// cutJob is the large message.
func cutJob() artemis.Outgoing {
	return artemis.Job("urn:babel:test:cut", map[string]string{"pad": strings.Repeat("x", cutSize)})
}

// drainWhole drains q of a large message that went out whole: exactly one
// when its publish was confirmed, at most one when its outcome is unknown
// (ctx ended after the last frame went, before the broker's answer), and
// never a partial one.
func drainWhole(t *testing.T, conn *brokertest.Conn, q string, confirmed bool) {
	t.Helper()
	got := conn.Drain(q, "")
	if confirmed {
		require.Len(t, got, 1, "the confirmed large message")
	} else {
		require.LessOrEqual(t, len(got), 1, "a large message whose outcome is unknown")
	}
	for _, m := range got {
		require.Greater(t, len(bodyOf(m)), cutSize, "a partial large message was enqueued")
	}
}

// publishCut publishes the large message through pub (newPub gives a
// publisher, a new one after a failed publish where the old one was closed)
// with a ctx cancelled after a delay, growing from 1 ms, until a cut happened
// while the frames were written: ctx's error and the broker seen writing a
// new large-message file. A publish that went out whole first is drained off
// q (an intact message, not the subject) and the next try waits less long.
// It returns the publisher to go on with.
func publishCut(t *testing.T, b *brokertest.Broker, conn *brokertest.Conn, q string, pub *artemis.Publisher, newPub func() *artemis.Publisher, before map[string]bool) *artemis.Publisher {
	t.Helper()
	delay := time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for try := 1; ; try++ {
		require.True(t, time.Now().Before(deadline) && try <= 60, "no cut between frames after %d tries", try-1)
		watched := watchLargeMessages(t, b, before)
		ctx, cancel := context.WithCancel(context.Background())
		timer := time.AfterFunc(delay, cancel)
		_, err := pub.Publish(ctx, cutJob())
		timer.Stop()
		cancel()
		if err != nil && newPub != nil {
			pub = newPub()
		}
		if err == nil || errors.Is(err, artemis.ErrOutcomeUnknown) {
			drainWhole(t, conn, q, err == nil)
			noNewLargeMessage(t, b, before)
			watched()
			delay = max(delay*3/4, 100*time.Microsecond)
			continue
		}
		require.ErrorIs(t, err, context.Canceled)
		noNewLargeMessage(t, b, before)
		if watched() {
			t.Logf("cut between frames on try %d, after %v", try, delay)
			return pub
		}
		delay *= 2
	}
}

// wantBodies drains q and checks it holds exactly the small messages.
func wantBodies(t *testing.T, conn *brokertest.Conn, q string, want ...string) {
	t.Helper()
	got := conn.Drain(q, "")
	var bodies []string
	for _, m := range got {
		body := bodyOf(m)
		require.Less(t, len(body), cutSize, "the cut message was enqueued")
		bodies = append(bodies, body)
	}
	require.Len(t, bodies, len(want), "the queue holds exactly the intact messages")
	for i, w := range want {
		require.Contains(t, bodies[i], w)
	}
}

// beforeCutAfter publishes a small message through pub and checks it
// arrived, cuts the large one between its frames (publishCut), then
// publishes another small one through the publisher to go on with: the
// queue holds exactly that one, and the broker no new large-message file.
func beforeCutAfter(ctx context.Context, t *testing.T, b *brokertest.Broker, conn *brokertest.Conn, q string, pub *artemis.Publisher, newPub func() *artemis.Publisher, before map[string]bool) {
	t.Helper()
	_, err := pub.Publish(ctx, artemis.Job("urn:babel:test:cut", map[string]string{"n": "before"}))
	require.NoError(t, err)
	first := conn.Drain(q, "")
	require.Len(t, first, 1)
	require.Contains(t, bodyOf(first[0]), `"before"`)

	after := publishCut(t, b, conn, q, pub, newPub, before)
	_, err = after.Publish(ctx, artemis.Job("urn:babel:test:cut", map[string]string{"n": "after"}))
	require.NoError(t, err)

	wantBodies(t, conn, q, `"after"`)
	noNewLargeMessage(t, b, before)
}

// TestIntegrationTransferCutBetweenFramesOnABarePublisher: a bare Publisher
// over an *amqp.Sender; its ctx ends between the large message's frames. The
// error is ctx's, the sender is closed (a new one carries the next publish),
// the queue holds the message before and the one after and never the cut
// one, and the broker deletes the partial file.
func TestIntegrationTransferCutBetweenFramesOnABarePublisher(t *testing.T) {
	b, conn, q := onBroker(t)
	before := largeMessages(t, b)
	via := b.Dial(t)
	pub := artemis.NewPublisher(via.NewSender(q), q)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()

	beforeCutAfter(ctx, t, b, conn, q, pub, func() *artemis.Publisher { return artemis.NewPublisher(via.NewSender(q), q) }, before)
}

// TestIntegrationTransferCutBetweenFramesOnAClientPublisher: the same
// through a Client's publisher, before, cut and after on the one publisher.
func TestIntegrationTransferCutBetweenFramesOnAClientPublisher(t *testing.T) {
	b, conn, q := onBroker(t)
	before := largeMessages(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{b.URL}, nil)
	require.NoError(t, err)
	defer func() { _ = c.Close(context.Background()) }()
	pub, err := c.Publisher(ctx, q)
	require.NoError(t, err)

	beforeCutAfter(ctx, t, b, conn, q, pub.Publisher, nil, before)
}

// TestIntegrationTransferCutByAConnectionReset: the connection is reset in
// the middle of the large transfer (after a random 1 to 3 MiB of it went).
// The publish fails, the broker never enqueues a partial message and deletes
// its partial file.
func TestIntegrationTransferCutByAConnectionReset(t *testing.T) {
	b, conn, q := onBroker(t)
	before := largeMessages(t, b)
	p, proxied := testkit.FaultProxy(t, b, 7) // 7: any seed; it fixes where in 1 to 3 MiB the cut falls
	via := dialVia(t, b, proxied)
	pub := artemis.NewPublisher(via.NewSender(q), q)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()

	require.NoError(t, p.CutAfter(1<<20, 3<<20))
	watched := watchLargeMessages(t, b, before)
	_, err := pub.Publish(ctx, cutJob())
	require.Error(t, err, "the publish over a reset connection must fail")
	require.GreaterOrEqual(t, p.Stats().Resets, int64(1), "the proxy reset the connection")

	wantBodies(t, conn, q)
	noNewLargeMessage(t, b, before)
	require.True(t, watched(), "the broker never wrote a large-message file: the reset came before any frame")
}
