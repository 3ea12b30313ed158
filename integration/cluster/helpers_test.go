// Package cluster_test runs the library's cluster Client (DialCluster)
// against the 3-node cluster of `scripts/artemis cluster-start`, through the
// exported API only. Each test counts every message by meta.id and prints
// one line with its figures. The tests are skipped, with one line, when
// ARTEMIS_CLUSTER_URLS is not set.
package cluster_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

const urn = "urn:babel:cluster:test"

// quiet keeps the Client's warn lines (a killed member's loss) out of the
// test output; the tests check the outcome themselves.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// queueName is a fresh queue name for one test.
func queueName(t *testing.T, what string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "bqcluster." + what + "." + hex.EncodeToString(b)
}

// dialCluster dials every node of the cluster as one member each.
func dialCluster(t *testing.T, cl *brokertest.Cluster, opts *artemis.ClientOptions) *artemis.Client {
	t.Helper()
	if opts == nil {
		opts = &artemis.ClientOptions{}
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := artemis.DialCluster(ctx, cl.Members(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// dialNode dials one node alone.
func dialNode(t *testing.T, url string) *artemis.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{url}, &artemis.ClientOptions{Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// order is the payload of every test message.
type order struct {
	Group string `json:"group,omitempty"`
	Seq   int    `json:"seq"`
}

// tally counts handler calls by meta.id.
type tally struct {
	mu    sync.Mutex
	calls map[string]int
	ok    int // distinct ids handled
	want  int
	done  chan struct{}
	once  sync.Once
}

func newTally(want int) *tally {
	return &tally{calls: map[string]int{}, want: want, done: make(chan struct{})}
}

// add counts a call for id; it returns the number of calls so far.
func (t *tally) add(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls[id]++
	n := t.calls[id]
	if n == 1 {
		t.ok++
		if t.ok >= t.want {
			t.once.Do(func() { close(t.done) })
		}
	}
	return n
}

func (t *tally) handled() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ok
}

// figures compares the calls with the acknowledged ids: lost (acked, never
// handled), extra (handled but never acked), and duplicates (calls beyond
// the first of an id).
func (t *tally) figures(acked map[string]bool) (lost, extra, dups int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range acked {
		if t.calls[id] == 0 {
			lost++
		}
	}
	for id, n := range t.calls {
		if !acked[id] {
			extra++
		}
		dups += n - 1
	}
	return lost, extra, dups
}

// wait waits for want distinct ids, or fails the test after timeout.
func (t *tally) wait(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	select {
	case <-t.done:
	case <-time.After(timeout):
		tb.Fatalf("only %d of %d messages were handled within %v", t.handled(), t.want, timeout)
	}
}

// consume runs Consume on c for queue in the background until the test
// ends (or stop is called).
func consume(t *testing.T, c *artemis.Client, queue string, h artemis.HandlerFunc, opts ...artemis.ConsumerOption) (stop func()) {
	t.Helper()
	cons := testkit.MustConsumer(t, artemis.Handlers{urn: h}, append([]artemis.ConsumerOption{artemis.WithLogger(quiet)}, opts...)...)
	return testkit.ConsumeInBackground(t, c, queue, cons, 30*time.Second)
}

// publishAll publishes n messages on p with a window of receipts in
// flight, and returns the acknowledged ids.
func publishAll(t *testing.T, p *artemis.ClientPublisher, n, window int, data func(i int) (any, []artemis.PublishOption)) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	acked := make(map[string]bool, n)
	pending := make([]*artemis.Receipt, 0, window)
	flush := func() {
		for _, r := range pending {
			require.NoError(t, r.Wait(ctx))
			acked[r.ID()] = true
		}
		pending = pending[:0]
	}
	for i := range n {
		d, opts := data(i)
		r, err := p.PublishWithReceipt(ctx, artemis.Job(urn, d), opts...)
		require.NoError(t, err)
		pending = append(pending, r)
		if len(pending) == window {
			flush()
		}
	}
	flush()
	return acked
}

// decode reads a message's payload.
func decode(t *testing.T, env *artemis.Envelope) order {
	var o order
	if err := json.Unmarshal(env.Data, &o); err != nil {
		t.Errorf("payload %s: %v", env.Data, err)
	}
	return o
}

// counts returns each node's message count for queue, read over AMQP from
// the broker's management address (a CLI call costs a JVM start).
func counts(t *testing.T, cl *brokertest.Cluster, queue string) []int {
	t.Helper()
	out := make([]int, len(cl.Nodes))
	for i, n := range cl.Nodes {
		out[i] = messageCount(t, n, queue)
	}
	return out
}

// messageCount asks one node for queue's messageCount.
func messageCount(t *testing.T, node *brokertest.Broker, queue string) int {
	t.Helper()
	text, ok := queueMessageCount(t, node, queue)
	require.True(t, ok, "messageCount of %s: %s", queue, text)
	var vals []int
	require.NoError(t, json.Unmarshal([]byte(text), &vals), "messageCount reply %q", text)
	require.Len(t, vals, 1)
	return vals[0]
}

// queueMessageCount asks one node's management for queue's messageCount:
// the reply's text, and whether the operation succeeded (false: no such
// queue).
func queueMessageCount(t *testing.T, node *brokertest.Broker, queue string) (string, bool) {
	t.Helper()
	conn := node.Dial(t)
	defer func() { _ = conn.Conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	rcv, err := conn.Session.NewReceiver(ctx, "", &amqp.ReceiverOptions{DynamicAddress: true, Credit: 1})
	require.NoError(t, err)
	snd, err := conn.Session.NewSender(ctx, "activemq.management", nil)
	require.NoError(t, err)
	reply := rcv.Address()
	err = snd.Send(ctx, &amqp.Message{
		Properties: &amqp.MessageProperties{MessageID: "count", ReplyTo: &reply},
		ApplicationProperties: map[string]any{
			"_AMQ_ResourceName": "queue." + queue,
			"_AMQ_Attribute":    "messageCount",
		},
		Value: "[]",
	}, nil)
	require.NoError(t, err)
	msg, err := rcv.Receive(ctx, nil)
	require.NoError(t, err)
	_ = rcv.AcceptMessage(ctx, msg)
	text, _ := msg.Value.(string)
	ok, _ := msg.ApplicationProperties["_AMQ_OperationSucceeded"].(bool)
	return text, ok
}

// line prints a test's figures as one line (go test shows stdout).
func line(format string, args ...any) {
	fmt.Printf("cluster: "+format+"\n", args...)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, "/")
}

// plainReceiver attaches a go-amqp receiver to queue on one node, the way
// an outside consumer would, for the tests that watch the broker itself.
func plainReceiver(t *testing.T, node *brokertest.Broker, queue string, credit int32) *amqp.Receiver {
	t.Helper()
	conn := node.Dial(t)
	return conn.NewReceiver(queue, &brokertest.ReceiverOptions{Credit: credit})
}
