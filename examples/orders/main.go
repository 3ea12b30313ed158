// Command orders is the BabelQueue main job on Artemis, end to end: it
// publishes five orders, consumes them with retries and a dead-letter
// queue, and tells what happened to each message.
//
// One order's handler fails every time: it is retried (attempts 0, 1, 2)
// and then dead-lettered with reason "failed". A message that is not JSON
// at all, put on the queue by a plain AMQP sender, is dead-lettered as a
// poison record. At the end the example browses <queue>.dlq (without
// consuming it) and prints the dead-letter block of both records.
//
//	cd examples && go run ./orders [-queue orders] [-timeout 60s]
//
// The broker is ARTEMIS_URL (default amqp://babel:babel@127.0.0.1:5672).
// The dead-letter records stay on <queue>.dlq for the bqartemis tool
// (cmd/bqartemis in the library's module): bqartemis inspect <queue>.dlq,
// then bqartemis redrive <queue>.dlq.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

// URNCreated is the URN of the orders this example publishes.
const URNCreated = "urn:babel:orders:created"

// FailingOrder is the order whose handler fails every time.
const FailingOrder = 1003

// MaxTries is how many deliveries a failing message gets.
const MaxTries = 3

// RetryBackoff spaces the failing order's attempts: 200ms, then 400ms (the
// default, 10s then 30s, is made to ride out a dependency's outage).
var RetryBackoff = artemis.Backoff{Initial: 200 * time.Millisecond, Max: time.Second, Multiplier: 2}

// PoisonText is the body of the poison message: plain text, not JSON.
const PoisonText = "order 1006; qty=2; sku=A-17"

func main() {
	var cfg broker.Config
	broker.Main("orders", &cfg, broker.Flags{Queue: "orders", QueueHelp: "the queue; dead-letter records go to <queue>.dlq", Timeout: time.Minute},
		func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
}

// Order is the business payload: the envelope's data object.
type Order struct {
	OrderID     int    `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
}

// GatewayError is what the failing order's handler returns. Its type name
// (*main.GatewayError) is what the dead_letter block records as exception.
type GatewayError struct{ OrderID int }

func (e *GatewayError) Error() string {
	return fmt.Sprintf("payment gateway timeout (order %d)", e.OrderID)
}

func run(ctx context.Context, cfg broker.Config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	dlq := cfg.Queue + ".dlq"
	fmt.Fprintf(out, "orders example: queue %s, dead-letter queue %s, broker %s\n", cfg.Queue, dlq, broker.Redact(cfg.URL))

	// The Client owns the connection: publishers and the consume loop
	// re-attach by themselves if it drops.
	client, err := artemis.Dial(ctx, []string{cfg.URL}, nil)
	if err != nil {
		return err
	}
	defer client.Close(context.Background())

	// 1. Publish the orders. Duplicate detection makes a publish whose
	// outcome was lost safe to retry: Artemis stores it once.
	pub, err := client.Publisher(ctx, cfg.Queue, artemis.WithDuplicateDetection())
	if err != nil {
		return err
	}
	orders := []Order{
		{1001, "ada", 1250}, {1002, "grace", 990}, {FailingOrder, "edsger", 4200},
		{1004, "barbara", 1575}, {1005, "ken", 660},
	}
	tr := newTracker()
	var numbers []string
	for _, o := range orders {
		id, err := pub.Publish(ctx, artemis.Job(URNCreated, o))
		if err != nil {
			return err
		}
		tr.add(id, fmt.Sprintf("order %d", o.OrderID))
		numbers = append(numbers, fmt.Sprint(o.OrderID))
	}
	fmt.Fprintf(out, "published %d orders: %s (order %d fails every time)\n", len(orders), strings.Join(numbers, " "), FailingOrder)

	// 2. A service that does not speak BabelQueue puts plain text on the
	// queue. Its AMQP message-id lets us find its poison record later.
	conn, sess, err := broker.Session(ctx, cfg.URL)
	if err != nil {
		return err
	}
	defer conn.Close()
	poisonID := "poison-" + broker.RandomHex(8)
	if err := sendText(ctx, sess, cfg.Queue, poisonID, PoisonText); err != nil {
		return err
	}
	tr.add(poisonID, "poison")
	fmt.Fprintf(out, "put a poison message (not JSON) on %s: %q\n", cfg.Queue, PoisonText)

	// 3. Consume until every message of this run is settled for good.
	fmt.Fprintf(out, "consuming (at most %d tries per message):\n", MaxTries)
	if err := consume(ctx, client, cfg.Queue, dlq, poisonID, tr, out); err != nil {
		return err
	}

	// 4. Read the dead-letter records of this run, leaving them in place.
	records, err := browseRecords(ctx, sess, dlq, []string{tr.idOf(fmt.Sprintf("order %d", FailingOrder)), poisonID})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "what happened to each message:")
	for _, id := range tr.order {
		fmt.Fprintf(out, "  %-10s  %s\n", tr.label[id], tr.story(id, records[id], dlq))
	}
	if tr.earlier {
		fmt.Fprintln(out, "(earlier): a message an earlier run left on the queue (a redriven one, for instance)")
	}
	fmt.Fprintf(out, "the dead-letter records stay on %s: bqartemis inspect %s, then bqartemis redrive %s\n", dlq, dlq, dlq)
	return nil
}

// event is one thing the consumer did with a delivery.
type event struct {
	id       string // meta.id, or the AMQP message-id of the poison message
	attempts int
	handled  bool
	err      *artemis.DeliveryError
}

func consume(ctx context.Context, client *artemis.Client, queue, dlq, poisonID string, tr *tracker, out io.Writer) error {
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	events := make(chan event, 16)
	emit := func(ev event) {
		select {
		case events <- ev:
		case <-cctx.Done():
		}
	}
	handle := func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		var o Order
		if err := env.Bind(&o); err != nil {
			return err
		}
		if o.OrderID == FailingOrder {
			return &GatewayError{OrderID: o.OrderID}
		}
		// A real handler would record the order here.
		emit(event{id: env.Meta.ID, attempts: env.Attempts, handled: true})
		return nil
	}
	onError := func(_ context.Context, err error, env *artemis.Envelope, msg *amqp.Message) {
		var de *artemis.DeliveryError
		if !errors.As(err, &de) {
			return
		}
		ev := event{attempts: de.Attempts, err: de}
		switch {
		case env != nil:
			ev.id = env.Meta.ID
		case msg != nil && msg.Properties != nil:
			ev.id = fmt.Sprint(msg.Properties.MessageID)
		}
		emit(ev)
	}
	// Consume attaches a receiver to the queue and a dead-letter sender to
	// <queue>.dlq, and runs until its context ends.
	bg, err := broker.Consume(cctx, client, queue, artemis.Handlers{URNCreated: handle},
		artemis.WithMaxTries(MaxTries), artemis.WithRetryBackoff(RetryBackoff), artemis.WithOnError(onError))
	if err != nil {
		return err
	}
	for !tr.finished() {
		select {
		case ev := <-events:
			fmt.Fprintln(out, "  "+tr.record(ev, dlq))
		case err := <-bg.Done():
			return broker.Early(err)
		case <-ctx.Done():
			_ = bg.Stop()
			return fmt.Errorf("gave up waiting for %s: %w", strings.Join(tr.pending(), ", "), ctx.Err())
		}
	}
	return bg.Stop()
}

// tracker remembers the messages this run put on the queue and what
// happened to each of them. Deliveries left over from an earlier run are
// shown but not tracked.
type tracker struct {
	order    []string          // ids in publish order
	label    map[string]string // id -> "order 1001" or "poison"
	attempts map[string][]int  // id -> the attempts that failed
	final    map[string]string // id -> "handled", "dead-lettered" or "dropped"
	handled  map[string]int    // id -> the attempt that succeeded
	earlier  bool              // a delivery of an earlier run was seen
}

func newTracker() *tracker {
	return &tracker{label: map[string]string{}, attempts: map[string][]int{},
		final: map[string]string{}, handled: map[string]int{}}
}

func (t *tracker) add(id, label string) {
	t.order = append(t.order, id)
	t.label[id] = label
}

func (t *tracker) idOf(label string) string {
	for _, id := range t.order {
		if t.label[id] == label {
			return id
		}
	}
	return ""
}

func (t *tracker) finished() bool { return len(t.pending()) == 0 }

func (t *tracker) pending() []string {
	var p []string
	for _, id := range t.order {
		if t.final[id] == "" {
			p = append(p, t.label[id])
		}
	}
	return p
}

// record notes ev and returns the line that tells it.
func (t *tracker) record(ev event, dlq string) string {
	label, ours := t.label[ev.id]
	if !ours {
		t.earlier = true
		label = "(earlier)" // left on the queue by an earlier run
	}
	head := fmt.Sprintf("%-10s  attempt %d  ", label, ev.attempts)
	if ev.handled {
		if ours {
			t.final[ev.id] = "handled"
			t.handled[ev.id] = ev.attempts
		}
		return head + "handled"
	}
	de := ev.err
	what := "failed: " + causeText(de)
	if errors.Is(de, artemis.ErrPoison) {
		what = "not a valid envelope"
	}
	switch de.Disposition {
	case artemis.DispositionAbandoned, artemis.DispositionScheduled:
		if ours && errors.Is(de, artemis.ErrHandlerFailed) {
			t.attempts[ev.id] = append(t.attempts[ev.id], ev.attempts)
		}
		return head + what + " -> back on the queue for a retry"
	case artemis.DispositionDeadLettered:
		if ours {
			if errors.Is(de, artemis.ErrHandlerFailed) {
				t.attempts[ev.id] = append(t.attempts[ev.id], ev.attempts)
			}
			t.final[ev.id] = "dead-lettered"
		}
		return head + what + " -> dead-lettered to " + dlq
	case artemis.DispositionDropped:
		if ours {
			t.final[ev.id] = "dropped"
		}
		return head + what + " -> dropped"
	}
	// A failed dead-letter write or settlement: the broker redelivers.
	return head + de.Error()
}

// story is the one-line account of a message at the end.
func (t *tracker) story(id string, rec *dlqRecord, dlq string) string {
	switch t.final[id] {
	case "handled":
		return fmt.Sprintf("handled on attempt %d", t.handled[id])
	case "dropped":
		return "dropped (no dead-letter queue)"
	}
	var b strings.Builder
	if tries := t.attempts[id]; len(tries) > 0 {
		fmt.Fprintf(&b, "failed on attempts %s, then ", joinInts(tries))
	} else {
		b.WriteString("never reached a handler, ")
	}
	if rec == nil {
		fmt.Fprintf(&b, "dead-lettered (its record was not found on %s)", dlq)
		return b.String()
	}
	dl := rec.DeadLetter
	fmt.Fprintf(&b, "dead-lettered to %s: reason %s, attempts %d, error %q", dlq, dl.Reason, dl.Attempts, deref(dl.Error))
	if dl.Exception != nil {
		fmt.Fprintf(&b, ", exception %s", *dl.Exception)
	}
	if rec.Raw != nil {
		fmt.Fprintf(&b, ", raw %q", *rec.Raw)
	}
	return b.String()
}

// dlqRecord is the part of a dead-letter record this example prints.
type dlqRecord struct {
	Meta struct {
		ID string `json:"id"`
	} `json:"meta"`
	Raw        *string             `json:"raw"`
	DeadLetter *artemis.DeadLetter `json:"dead_letter"`
}

// browseRecords reads the records of ids from dlq in browse mode (the
// "copy" distribution mode: Artemis sends copies and leaves the messages
// on the queue). A record is matched by its envelope's meta.id, or, for a
// poison record, by the AMQP message-id it kept from the original.
func browseRecords(ctx context.Context, sess *amqp.Session, dlq string, ids []string) (map[string]*dlqRecord, error) {
	r, err := queuelink.Browser(ctx, sess, dlq)
	if err != nil {
		return nil, err
	}
	defer r.Close(context.WithoutCancel(ctx))
	found := map[string]*dlqRecord{}
	for len(found) < len(ids) {
		msg, err := r.Receive(ctx, nil)
		if err != nil {
			return found, fmt.Errorf("browse %s: found %d of %d records: %w", dlq, len(found), len(ids), err)
		}
		var rec dlqRecord
		if json.Unmarshal([]byte(broker.BodyText(msg)), &rec) != nil || rec.DeadLetter == nil {
			continue
		}
		key := rec.Meta.ID
		if msg.Properties != nil && rec.Raw != nil {
			key = fmt.Sprint(msg.Properties.MessageID)
		}
		if slices.Contains(ids, key) {
			found[key] = &rec
		}
	}
	return found, nil
}

// sendText puts a plain AMQP message (a string body, no BabelQueue
// properties) on queue and waits for the broker to accept it.
func sendText(ctx context.Context, sess *amqp.Session, queue, messageID, text string) error {
	s, err := queuelink.Sender(ctx, sess, queue)
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	msg := &amqp.Message{
		Header:     &amqp.MessageHeader{Durable: true, Priority: 4}, // 4: the AMQP and JMS default
		Properties: &amqp.MessageProperties{MessageID: messageID},
		Value:      text,
	}
	if err := s.Send(ctx, msg, nil); err != nil {
		return fmt.Errorf("put the poison message on %s: %w", queue, err)
	}
	return nil
}

// causeText is the handler's error, without the DeliveryError's summary.
func causeText(de *artemis.DeliveryError) string {
	if de.Err != nil {
		return de.Err.Error()
	}
	return de.Error()
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
