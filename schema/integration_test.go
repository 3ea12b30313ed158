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
	t.Cleanup(func() { _ = c.Close(context.Background()) })
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
	if _, err := checked.Publish(ctx, artemis.Job(conformanceURN, map[string]any{"orderId": 1042})); !errors.Is(err, artemis.ErrInvalidPayload) {
		t.Fatalf("the checked publisher sent invalid data: %v", err)
	} else if !strings.Contains(err.Error(), "/order_id: is required") {
		t.Errorf("refusal: %v", err)
	}

	unchecked, err := client.Publisher(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	badID, err := unchecked.Publish(ctx, artemis.Job(conformanceURN, json.RawMessage(`{"orderId":1042}`)))
	if err != nil {
		t.Fatal(err)
	}
	goodID, err := unchecked.Publish(ctx, artemis.Job(conformanceURN, json.RawMessage(`{"order_id":1042}`)))
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
	dlqCons, err := artemis.NewConsumer(artemis.Handlers{conformanceURN: dead.handler}, artemis.WithoutDeadLetter())
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
			if err := client.Consume(cctx, run.queue, run.cons); err != nil {
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
	wantErr := "artemis: invalid payload for urn:babel:orders:created: /orderId: is not allowed; /order_id: is required"
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

// hostileOrder is an order of n lines whose numbers have a huge exponent:
// each one, turned into a math/big value by the validator, cost 40 to 90
// ms before the check's bounds.
func hostileOrder(n int) json.RawMessage {
	return json.RawMessage(orderLines(n, "1e999999", "1e999999"))
}

// TestBrokerHostilePayloadDoesNotHoldTheNextMessage: a producer without
// the schema puts a message of 800 huge exponents on the queue, and
// an ordinary one after it; the consumer with the registry dead-letters the
// first at once, with the violation at its pointer, and hands the second to
// its handler promptly; Consume returns promptly when its context ends.
func TestBrokerHostilePayloadDoesNotHoldTheNextMessage(t *testing.T) {
	url := brokerURL(t)
	reg := ordersRegistry(t)
	client := dial(t, url)
	q := uniqueQueue("schema-hostile")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	unchecked, err := client.Publisher(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	hostile := hostileOrder(400)
	badID, err := unchecked.Publish(ctx, artemis.Job(ordersURN, hostile))
	if err != nil {
		t.Fatal(err)
	}
	goodID, err := unchecked.Publish(ctx, artemis.Job(ordersURN, json.RawMessage(orderLines(3, "2", "10.5"))))
	if err != nil {
		t.Fatal(err)
	}

	handled := newReceived()
	cons, err := artemis.NewConsumer(artemis.Handlers{ordersURN: handled.handler}, reg.ConsumerOption(),
		artemis.WithLogger(nil), artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
	if err != nil {
		t.Fatal(err)
	}
	dead := newReceived()
	dlqCons, err := artemis.NewConsumer(artemis.Handlers{ordersURN: dead.handler}, artemis.WithoutDeadLetter())
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	returned := make(chan error, 2)
	for _, run := range []struct {
		queue string
		cons  *artemis.Consumer
	}{{q, cons}, {q + ".dlq", dlqCons}} {
		go func() {
			returned <- client.Consume(cctx, run.queue, run.cons)
		}()
	}
	start := time.Now()
	got := handled.wait(t, 1, 15*time.Second)
	t.Logf("the next message handled %v after the consume started, behind a hostile one of %d bytes", time.Since(start), len(hostile))
	if got[0].Meta.ID != goodID {
		t.Fatalf("the handler got %s, want %s", got[0].Meta.ID, goodID)
	}
	dl := dead.wait(t, 1, 15*time.Second)[0]
	if dl.Meta.ID != badID || dl.DeadLetter == nil || dl.DeadLetter.Error == nil {
		t.Fatalf("the DLQ has %s (%+v), want %s with its dead_letter block", dl.Meta.ID, dl.DeadLetter, badID)
	}
	want := "artemis: invalid payload for " + ordersURN + ": /lines/0/qty: is a number whose exponent is beyond the payload check's bound (e+400 or e-400)"
	if *dl.DeadLetter.Error != want {
		t.Errorf("error %q, want %q", *dl.DeadLetter.Error, want)
	}
	if string(dl.Data) != string(hostile) {
		t.Errorf("the record's data was changed")
	}
	stop()
	ended := time.Now()
	for range 2 {
		select {
		case err := <-returned:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Consume: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("Consume did not return after its context ended")
		}
	}
	t.Logf("Consume returned %v after its context ended", time.Since(ended))
	handled.none(t, 200*time.Millisecond)
}

// TestBrokerPublishWithAShortContextReturnsByItsDeadline: a checked
// publish of hostile data is refused at once, well before its context
// ends; one of a data object too large to check within its context returns
// the context's error, and neither reaches the queue.
func TestBrokerPublishWithAShortContextReturnsByItsDeadline(t *testing.T) {
	url := brokerURL(t)
	reg := ordersRegistry(t)
	client := dial(t, url)
	q := uniqueQueue("schema-deadline")
	setup, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	checked, err := client.Publisher(setup, q, reg.PublishOption())
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancelShort := context.WithTimeout(setup, 500*time.Millisecond)
	start := time.Now()
	_, err = checked.Publish(ctx, artemis.Job(ordersURN, json.RawMessage(orderLines(10, "1e999999", "1E+999999"))))
	t.Logf("hostile order lines: returned after %v: %v", time.Since(start), err)
	if !errors.Is(err, artemis.ErrInvalidPayload) || ctx.Err() != nil {
		t.Errorf("want a refusal before the deadline, got %v (context: %v)", err, ctx.Err())
	}
	cancelShort()

	big := slowOrder(4 << 20)
	ctx, cancelShort = context.WithTimeout(setup, 100*time.Millisecond)
	defer cancelShort()
	start = time.Now()
	_, err = checked.Publish(ctx, artemis.Job(ordersURN, json.RawMessage(big)))
	t.Logf("a %d-byte order with a 100 ms context: returned after %v: %v", len(big), time.Since(start), err)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, artemis.ErrInvalidPayload) {
		t.Errorf("want the context's error, got %v", err)
	}

	// Nothing reached the queue.
	seen := newReceived()
	cons, err := artemis.NewConsumer(artemis.Handlers{ordersURN: seen.handler})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(setup)
	done := make(chan error, 1)
	go func() { done <- client.Consume(cctx, q, cons) }()
	seen.none(t, time.Second)
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Consume: %v", err)
	}
}
