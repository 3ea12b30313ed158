package schema

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// brokerURL is the broker of the integration tests, or a skip.
func brokerURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("ARTEMIS_URL")
	if u == "" {
		t.Skip("ARTEMIS_URL not set: the broker tests of the schema module need a running Artemis (see scripts/artemis)")
	}
	return u
}

func uniqueQueue(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

func dial(t *testing.T, url string) *artemis.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// received collects what a handler was given.
type received struct {
	mu   sync.Mutex
	envs []*artemis.Envelope
	ch   chan struct{}
}

func newReceived() *received { return &received{ch: make(chan struct{}, 64)} }

func (r *received) handler(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
	r.mu.Lock()
	r.envs = append(r.envs, env)
	r.mu.Unlock()
	r.ch <- struct{}{}
	return nil
}

func (r *received) wait(t *testing.T, n int, within time.Duration) []*artemis.Envelope {
	t.Helper()
	deadline := time.After(within)
	for i := 0; i < n; i++ {
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("%d of %d messages arrived within %v", i, n, within)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*artemis.Envelope(nil), r.envs...)
}

// none asserts that nothing more arrives for a while.
func (r *received) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-r.ch:
		t.Fatal("a message arrived that should not exist")
	case <-time.After(d):
	}
}

// TestBrokerInvalidPayloadIsDeadLettered: a producer without the schema
// (a service that renamed order_id to orderId) puts invalid data on the
// queue; the consumer with the registry never hands it to the handler and
// writes it to <queue>.dlq at once with the violations; a producer with
// the registry is refused and puts nothing on the queue.
func TestBrokerInvalidPayloadIsDeadLettered(t *testing.T) {
	url := brokerURL(t)
	c := loadConformance(t)
	reg, err := New(Bytes(conformanceURN, c.Schema))
	if err != nil {
		t.Fatal(err)
	}
	client := dial(t, url)
	q := uniqueQueue("schema-it")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	checked, err := client.Publisher(ctx, q, reg.PublishOption())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checked.Publish(ctx, conformanceURN, map[string]any{"orderId": 1042}); !errors.Is(err, artemis.ErrInvalidPayload) {
		t.Fatalf("the checked publisher sent invalid data: %v", err)
	} else if !strings.Contains(err.Error(), "/order_id: is required") {
		t.Errorf("refusal: %v", err)
	}

	unchecked, err := client.Publisher(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	badID, err := unchecked.Publish(ctx, conformanceURN, json.RawMessage(`{"orderId":1042}`))
	if err != nil {
		t.Fatal(err)
	}
	goodID, err := unchecked.Publish(ctx, conformanceURN, json.RawMessage(`{"order_id":1042}`))
	if err != nil {
		t.Fatal(err)
	}

	handled := newReceived()
	cons, err := artemis.NewConsumer(artemis.Handlers{conformanceURN: handled.handler}, reg.ConsumerOption(),
		artemis.WithMaxTries(5), artemis.WithLogger(nil), artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
	if err != nil {
		t.Fatal(err)
	}
	dead := newReceived()
	dlqCons, err := artemis.NewConsumer(artemis.Handlers{conformanceURN: dead.handler})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, run := range []struct {
		queue string
		cons  *artemis.Consumer
	}{{q, cons}, {q + ".dlq", dlqCons}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := client.Consume(cctx, run.queue, run.cons, &artemis.ConsumeOptions{NoDeadLetter: run.queue != q}); err != nil {
				t.Errorf("Consume %s: %v", run.queue, err)
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()

	got := handled.wait(t, 1, 30*time.Second)
	if got[0].Meta.ID != goodID {
		t.Errorf("the handler got %s, want only the valid message %s", got[0].Meta.ID, goodID)
	}
	dl := dead.wait(t, 1, 30*time.Second)[0]
	if dl.Meta.ID != badID {
		t.Fatalf("the DLQ has %s, want %s", dl.Meta.ID, badID)
	}
	if string(dl.Data) != `{"orderId":1042}` {
		t.Errorf("the record's data is %s, want it unchanged", dl.Data)
	}
	b := dl.DeadLetter
	if b == nil {
		t.Fatal("the record has no dead_letter block")
	}
	wantErr := "babelqueue: invalid payload for urn:babel:orders:created: /orderId: is not allowed; /order_id: is required"
	switch {
	case b.Reason != artemis.ReasonFailed:
		t.Errorf("reason %q, want failed", b.Reason)
	case b.Error == nil || *b.Error != wantErr:
		t.Errorf("error %v, want %q", b.Error, wantErr)
	case b.Exception == nil || *b.Exception != "*artemis.PayloadError":
		t.Errorf("exception %v, want *artemis.PayloadError", b.Exception)
	case b.Attempts != 0:
		t.Errorf("attempts %d, want 0: dead-lettered on its first delivery", b.Attempts)
	case b.OriginalQueue != q:
		t.Errorf("original_queue %q, want %q", b.OriginalQueue, q)
	}
	// Nothing else: the refused publish never reached the queue, and the
	// invalid message was not redelivered to the handler.
	handled.none(t, 500*time.Millisecond)
	dead.none(t, 100*time.Millisecond)
}
