package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/exampletest"
)

func TestOrders(t *testing.T) {
	ex := exampletest.New(t, "ex-orders")
	queue, dlq := ex.Queue, ex.Queue+".dlq"
	ex.Purge(queue, dlq)

	text := ex.Run(func(ctx context.Context, w io.Writer) error { return run(ctx, ex.Config(time.Minute), w) })

	for _, want := range []string{
		"order 1001  attempt 0  handled",
		"order 1002  attempt 0  handled",
		"order 1004  attempt 0  handled",
		"order 1005  attempt 0  handled",
		"order 1003  attempt 0  failed: payment gateway timeout (order 1003) -> back on the queue for a retry",
		"order 1003  attempt 1  failed: payment gateway timeout (order 1003) -> back on the queue for a retry",
		"order 1003  attempt 2  failed: payment gateway timeout (order 1003) -> dead-lettered to " + dlq,
		"poison      attempt 0  not a valid envelope -> dead-lettered to " + dlq,
		"order 1003  failed on attempts 0, 1, 2, then dead-lettered to " + dlq + ": reason failed, attempts 2",
		"exception *main.GatewayError",
		"reason poison",
		`raw "` + PoisonText + `"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	// Same priority, first in first out: the poison message, put on the
	// queue after the orders, comes after the first of them.
	if first, poison := strings.Index(text, "order 1001  attempt 0"), strings.Index(text, "poison      attempt 0"); first > poison {
		t.Error("the poison message was delivered before the orders published ahead of it")
	}
	if n := strings.Count(text, "order 1003  attempt"); n != MaxTries {
		t.Errorf("order 1003 was tried %d times, want %d", n, MaxTries)
	}

	// The effects on the broker: the queue is empty, and the dead-letter
	// queue holds exactly the two records, still there after the example
	// browsed them.
	if left := ex.Browse(queue); len(left) != 0 {
		t.Errorf("%d messages left on %s, want 0", len(left), queue)
	}
	records := ex.Browse(dlq)
	if len(records) != 2 {
		t.Fatalf("%s holds %d records, want 2", dlq, len(records))
	}
	reasons := map[string]bool{}
	for _, m := range records {
		body := broker.BodyText(m)
		var rec struct {
			Job        string              `json:"job"`
			Raw        string              `json:"raw"`
			DeadLetter *artemis.DeadLetter `json:"dead_letter"`
			Data       Order               `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &rec); err != nil || rec.DeadLetter == nil {
			t.Fatalf("a record on %s is not a dead-letter record (%v): %s", dlq, err, body)
		}
		dl := rec.DeadLetter
		reasons[dl.Reason] = true
		if dl.OriginalQueue != queue {
			t.Errorf("original_queue %q, want %q", dl.OriginalQueue, queue)
		}
		switch dl.Reason {
		case artemis.ReasonFailed:
			if rec.Job != URNCreated || rec.Data.OrderID != FailingOrder || dl.Attempts != MaxTries-1 {
				t.Errorf("failed record: job %q order %d attempts %d, want %s %d %d", rec.Job, rec.Data.OrderID, dl.Attempts, URNCreated, FailingOrder, MaxTries-1)
			}
		case artemis.ReasonPoison:
			if rec.Raw != PoisonText {
				t.Errorf("poison record raw %q, want %q", rec.Raw, PoisonText)
			}
		}
	}
	if !reasons[artemis.ReasonFailed] || !reasons[artemis.ReasonPoison] {
		t.Errorf("record reasons %v, want failed and poison", reasons)
	}
}
