package main

import (
	"bytes"
	"context"
	"reflect"
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
