package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
)

// TestSubscriptionDLQs: each subscription's DLQ is <subscription>.dlq when
// the broker has it, whatever the subscription's queue name (a durable,
// a non-durable, a Qpid JMS shared one); a subscription without one gets
// none, and a queue named like a DLQ that is bound to the topic is a
// subscription of its own.
func TestSubscriptionDLQs(t *testing.T) {
	subs := []string{"analytics", "analytics.dlq", "billing", "billing:global", "live:shared-volatile:global", "shipping"}
	present := map[string]bool{
		"analytics": true, "analytics.dlq": true, "billing": true, "billing:global": true,
		"live:shared-volatile:global": true, "shipping": true,
		"billing.dlq": true, "billing:global.dlq": true, "live:shared-volatile:global.dlq": true,
		"orders.dlq": true, "DLQ": true, // other queues of the broker
	}
	want := map[string]string{
		"billing":                     "billing.dlq",
		"billing:global":              "billing:global.dlq",
		"live:shared-volatile:global": "live:shared-volatile:global.dlq",
	}
	if got := subscriptionDLQs(subs, present); !reflect.DeepEqual(got, want) {
		t.Errorf("subscriptionDLQs = %v, want %v", got, want)
	}
	if got := subscriptionDLQs(subs, nil); len(got) != 0 {
		t.Errorf("without the queue list: %v, want none", got)
	}
}

// TestStatsShowsASubscriptionsDLQ: in the table a subscription's DLQ is
// the row right after it; in -json it is the subscription line's "dlq"
// object, and a line without a DLQ is as before (no "dlq" key).
func TestStatsShowsASubscriptionsDLQ(t *testing.T) {
	dlq := queueStat{Queue: "billing.dlq", Messages: 3, Added: 4, Address: "billing.dlq", Routing: "anycast", Durable: true}
	rows := []queueStat{
		{Queue: "billing", Consumers: 2, Added: 120, Address: "orders.events", Routing: "multicast", Durable: true, DLQ: &dlq},
		{Queue: "shipping", Messages: 4, Consumers: 1, Delivering: 1, Added: 120, Address: "orders.events", Routing: "multicast", Durable: true},
	}
	var buf bytes.Buffer
	if err := printStats(&buf, rows, false); err != nil {
		t.Fatal(err)
	}
	wantTable := `QUEUE        MESSAGES  CONSUMERS  DELIVERING  SCHEDULED  ADDED  ADDRESS        ROUTING    DURABLE
billing      0         2          0           0          120    orders.events  multicast  true
billing.dlq  3         0          0           0          4      billing.dlq    anycast    true
shipping     4         1          1           0          120    orders.events  multicast  true
`
	if buf.String() != wantTable {
		t.Errorf("table:\n%s\nwant:\n%s", buf.String(), wantTable)
	}

	buf.Reset()
	if err := printStats(&buf, rows, true); err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"queue":"billing","messages":0,"consumers":2,"delivering":0,"scheduled":0,"added":120,"address":"orders.events","routing":"multicast","durable":true,"dlq":{"queue":"billing.dlq","messages":3,"consumers":0,"delivering":0,"scheduled":0,"added":4,"address":"billing.dlq","routing":"anycast","durable":true}}
{"queue":"shipping","messages":4,"consumers":1,"delivering":1,"scheduled":0,"added":120,"address":"orders.events","routing":"multicast","durable":true}
`
	if buf.String() != wantJSON {
		t.Errorf("JSON:\n%s\nwant:\n%s", buf.String(), wantJSON)
	}
	if strings.Count(buf.String(), "\n") != len(rows) {
		t.Errorf("want one JSON line per subscription:\n%s", buf.String())
	}
}

// hangingLink is a management link whose detach is never answered.
type hangingLink struct{}

func (hangingLink) Send(context.Context, *amqp.Message, *amqp.SendOptions) error { return nil }
func (hangingLink) Receive(ctx context.Context, _ *amqp.ReceiveOptions) (*amqp.Message, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (hangingLink) AcceptMessage(context.Context, *amqp.Message) error { return nil }
func (hangingLink) Close(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// The management links' close is bounded: a broker that never answers the
// detach does not keep the command from exiting.
func TestManagerCloseIsBounded(t *testing.T) {
	defer func(d time.Duration) { closeTimeout = d }(closeTimeout)
	closeTimeout = 50 * time.Millisecond
	m := &manager{snd: hangingLink{}, rcv: hangingLink{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.close(context.Background())
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not return")
	}
}

// fakeBroker answers management requests (fakeManagement) from its
// addresses and queues; before, when set, runs before each answer and
// may change them, as another client would between two requests.
type fakeBroker struct {
	addresses map[string][]string // an address, its queues
	queues    map[string]bool
	before    func(b *fakeBroker, resource, attribute string)
	refused   string // a resource every request on fails
}

func (b *fakeBroker) answer(resource, attribute string) (any, bool) {
	if b.before != nil {
		b.before(b, resource, attribute)
	}
	notFound := "AMQ229xxx: cannot find resource with name " + resource
	_, name, _ := strings.Cut(resource, ".")
	switch {
	case resource == b.refused:
		return notFound, false
	case resource == "broker" && attribute == "QueueNames":
		return sortedKeys(b.queues), true
	case resource == "broker" && attribute == "AddressNames":
		return sortedKeys(b.addresses), true
	case strings.HasPrefix(resource, "address."):
		qs, ok := b.addresses[name]
		if !ok {
			return notFound, false
		}
		return qs, true
	case strings.HasPrefix(resource, "queue.") && b.queues[name]:
		switch attribute {
		case "Temporary":
			return false, true
		case "Durable":
			return true, true
		case "RoutingType":
			return "MULTICAST", true
		case "Address":
			for a, qs := range b.addresses {
				if slices.Contains(qs, name) {
					return a, true
				}
			}
			return name, true
		}
		return 0, true
	}
	return notFound, false
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// fakeManagement is a manager's links to a fakeBroker: each request is
// answered at once, by correlation-id, as Artemis answers.
type fakeManagement struct {
	b       *fakeBroker
	replies chan *amqp.Message
}

func (b *fakeBroker) manager() *manager {
	f := &fakeManagement{b: b, replies: make(chan *amqp.Message, 64)}
	return &manager{snd: f, rcv: f, reply: "reply"}
}

func (f *fakeManagement) Send(_ context.Context, msg *amqp.Message, _ *amqp.SendOptions) error {
	resource, _ := msg.ApplicationProperties[propResource].(string)
	attribute, _ := msg.ApplicationProperties[propAttribute].(string)
	v, ok := f.b.answer(resource, attribute)
	body, err := json.Marshal([]any{v})
	if err != nil {
		return err
	}
	f.replies <- &amqp.Message{
		Properties:            &amqp.MessageProperties{CorrelationID: msg.Properties.MessageID},
		ApplicationProperties: map[string]any{propSucceeded: ok},
		Value:                 string(body),
	}
	return nil
}

func (f *fakeManagement) Receive(ctx context.Context, _ *amqp.ReceiveOptions) (*amqp.Message, error) {
	select {
	case m := <-f.replies:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeManagement) AcceptMessage(context.Context, *amqp.Message) error { return nil }
func (f *fakeManagement) Close(context.Context) error                        { return nil }

// statsQueues names the rows' queues.
func statsQueues(rows []queueStat) string {
	var names []string
	for _, r := range rows {
		names = append(names, r.Queue)
	}
	return strings.Join(names, " ")
}

// An address created on the broker between stats -address's read of it
// (refused: no such resource yet) and its look in the address list is
// read again, not reported as a failure: on a cluster, a member exited 1
// when it happened there.
func TestStatsAddressCreatedWhileItIsRead(t *testing.T) {
	b := &fakeBroker{addresses: map[string][]string{}, queues: map[string]bool{}}
	b.before = func(b *fakeBroker, resource, attribute string) {
		if resource == "broker" && attribute == "AddressNames" {
			b.addresses["orders.events"] = []string{"billing"}
			b.queues["billing"] = true
		}
	}
	rows, err := b.manager().stats(context.Background(), "orders.events", nil)
	if err != nil || statsQueues(rows) != "billing" {
		t.Errorf("stats -address: rows %q, %v; want billing and no error", statsQueues(rows), err)
	}

	// Still refused after it is listed: a failure, not a missing address.
	b = &fakeBroker{addresses: map[string][]string{"orders.events": nil}, queues: map[string]bool{}, refused: "address.orders.events"}
	_, err = b.manager().stats(context.Background(), "orders.events", nil)
	if err == nil || onlyMissing(err) {
		t.Errorf("an address listed but never readable: %v, want a failure", err)
	}
	// Not on the broker: missing.
	b = &fakeBroker{addresses: map[string][]string{}, queues: map[string]bool{}}
	if _, err = b.manager().stats(context.Background(), "orders.events", nil); !errors.Is(err, errAddressMissing) {
		t.Errorf("no such address: %v, want errAddressMissing", err)
	}
}

// A queue listed (bound to the address with -address, or in the broker's
// list without arguments) and deleted before stats reads it is left out:
// the listing is a moment's, and the queue is gone, which is neither a
// failure nor a missing address (with -cluster, it made the member with
// the topic count as one without it, and the command exit 1). A queue
// named on the command line and missing is still an error naming it.
func TestStatsLeavesOutAQueueDeletedWhileRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		address string
		at      string // the request before which shipping is deleted
	}{
		{"-address, before the queue list", "orders.events", "broker QueueNames"},
		{"-address, before its read", "orders.events", "queue.shipping MessageCount"},
		{"every queue, before its read", "", "queue.shipping MessageCount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &fakeBroker{
				addresses: map[string][]string{"orders.events": {"billing", "shipping"}},
				queues:    map[string]bool{"billing": true, "shipping": true},
			}
			b.before = func(b *fakeBroker, resource, attribute string) {
				if resource+" "+attribute == tc.at {
					delete(b.queues, "shipping")
					b.addresses["orders.events"] = []string{"billing"}
				}
			}
			rows, err := b.manager().stats(context.Background(), tc.address, nil)
			if err != nil || statsQueues(rows) != "billing" {
				t.Errorf("rows %q, %v; want billing and no error", statsQueues(rows), err)
			}
		})
	}
	b := &fakeBroker{addresses: map[string][]string{}, queues: map[string]bool{"billing": true}}
	rows, err := b.manager().stats(context.Background(), "", []string{"billing", "nope"})
	if !errors.Is(err, errQueueMissing) || !strings.Contains(err.Error(), "nope") || statsQueues(rows) != "billing" {
		t.Errorf("a named queue missing: rows %q, %v; want billing and nope missing", statsQueues(rows), err)
	}
}
