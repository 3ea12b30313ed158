package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/exampletest"
)

func TestPubSub(t *testing.T) {
	ex := exampletest.New(t, "ex-pubsub")
	topic := ex.Queue
	billing, shipping := topic+".billing", topic+".shipping"
	out := ex.Run(func(ctx context.Context, w io.Writer) error { return run(ctx, ex.Config(time.Minute), w) })
	text := strings.Join(strings.Fields(out), " ") // the columns' padding aside

	for _, order := range []int{1001, 1002, FailingOrder, 1004} {
		if n := strings.Count(text, fmt.Sprintf("shipping order %d %s", order, URNCreated)); n != 1 {
			t.Errorf("shipping handled order %d created %d times, want once", order, n)
		}
		if n := strings.Count(text, fmt.Sprintf("billing order %d %s", order, URNCreated)); n != 1 {
			t.Errorf("billing handled order %d created %d times, want once (by one of its instances)", order, n)
		}
	}
	if n := strings.Count(text, "billing order 1002 "+URNCancelled+" refunded"); n != 1 {
		t.Errorf("billing refunded order 1002 %d times, want once", n)
	}
	if strings.Contains(text, "shipping order 1002 "+URNCancelled) {
		t.Error("shipping received a cancellation: its WithOnlyHandledURNs selector did not hold")
	}
	if !strings.Contains(text, fmt.Sprintf("shipping order %d %s packed", FailingOrder, URNCreated)) {
		t.Error("shipping did not pack the order billing failed")
	}
	want := fmt.Sprintf("%s.dlq holds order %d: reason failed, original_queue %s::%s", billing, FailingOrder, topic, billing)
	if !strings.Contains(text, want) {
		t.Errorf("the output lacks %q", want)
	}

	// On the broker: billing's DLQ holds the one record, shipping's none,
	// and both subscriptions are drained.
	records := ex.Browse(billing + ".dlq")
	if len(records) != 1 {
		t.Fatalf("%s.dlq holds %d records, want 1", billing, len(records))
	}
	var rec struct {
		DeadLetter *artemis.DeadLetter `json:"dead_letter"`
	}
	if err := json.Unmarshal([]byte(broker.BodyText(records[0])), &rec); err != nil || rec.DeadLetter == nil {
		t.Fatalf("not a dead-letter record (%v)", err)
	}
	if rec.DeadLetter.OriginalQueue != topic+"::"+billing {
		t.Errorf("original_queue %q, want %q", rec.DeadLetter.OriginalQueue, topic+"::"+billing)
	}
	for _, q := range []string{shipping + ".dlq", billing, shipping} {
		if left := ex.Browse(q); len(left) != 0 {
			t.Errorf("%d messages left on %s, want 0", len(left), q)
		}
	}
	// The example leaves the record for bqartemis; the test takes it off.
	ex.Purge(billing + ".dlq")
}
