package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// brokerHasQueue asks the broker's management address for its queue list.
func brokerHasQueue(t *testing.T, env map[string]string, queue string) bool {
	t.Helper()
	s := mustDial(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := newManager(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close(ctx)
	names, err := m.queueNames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n == queue {
			return true
		}
	}
	return false
}

// TestIntegrationReadingAMissingQueueDoesNotCreateIt: inspect, peek and
// redrive of a queue that does not exist, and redrive -to one, fail with
// an error that names it, and the queue still does not exist after.
func TestIntegrationReadingAMissingQueueDoesNotCreateIt(t *testing.T) {
	env, _, _, dlq := makeDeadLetters(t)
	missing := brokertest.Queue(t) + ".misspelt"
	for _, args := range [][]string{
		{"inspect", missing},
		{"peek", missing},
		{"redrive", missing},
		{"redrive", missing, "-dry-run"},
		{"redrive", dlq, "-to", missing},
		{"redrive", dlq, "-to", missing, "-dry-run"},
	} {
		out, errOut, code := runCLI(t, env, "", append(args, "-idle", "300ms")...)
		if code == exitOK || !strings.Contains(errOut, missing) || !strings.Contains(errOut, "does not exist") {
			t.Errorf("%v: exit %d, want a failure naming %s:\n%s%s", args, code, missing, out, errOut)
		}
		if brokerHasQueue(t, env, missing) {
			t.Fatalf("%v created the queue %s", args, missing)
		}
	}
	// Nothing left the DLQ on the way.
	if st := statOf(t, env, dlq); st["messages"] != 4.0 {
		t.Errorf("the DLQ after the refused redrives: %v", st)
	}
}

// failingConsumer dead-letters every delivery of queue (its handler
// always fails, max tries 1) until the returned stop is called.
func failingConsumer(t *testing.T, c *brokertest.Conn, queue string) (stop func() int) {
	t.Helper()
	dlq := c.NewSender(queue + ".dlq")
	cons, err := artemis.NewConsumer(artemis.Handlers{
		urnFail: func(context.Context, *artemis.Envelope, *amqp.Message) error { return errors.New("still down") },
	}, artemis.WithDeadLetterSender(dlq), artemis.WithMaxTries(1), artemis.WithQueue(queue),
		artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
	if err != nil {
		t.Fatal(err)
	}
	r := c.NewReceiver(queue, &brokertest.ReceiverOptions{Credit: 1})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	handled := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			msg, err := r.Receive(rctx, nil)
			rcancel()
			if err != nil {
				continue
			}
			hctx, hcancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
			_ = cons.Handle(hctx, r, msg)
			hcancel()
			handled++
		}
	}()
	return func() int {
		cancel()
		wg.Wait()
		c.CloseReceiver(r)
		return handled
	}
}

// TestIntegrationRedriveStopsALoop: while the consumer still fails, a
// redriven record comes straight back to the DLQ; redrive sees the record
// it moved come back, stops with a clear message and a failure status,
// and the record is on the DLQ, not lost.
func TestIntegrationRedriveStopsALoop(t *testing.T) {
	env := brokerEnv(t)
	c := brokertest.Require(t).Dial(t)
	queue := brokertest.Queue(t)
	dlq := queue + ".dlq"
	id := strings.TrimSpace(cli(t, env, "publish", queue, urnFail, `{"n":1}`))
	consumeOnce(t, c, queue, 1)

	stop := failingConsumer(t, c, queue)
	start := time.Now()
	out, errOut, code := runCLI(t, env, "", "redrive", dlq, "-idle", "5s", "-timeout", "60s")
	took := time.Since(start)
	handled := stop()

	if code != exitFailed || !strings.Contains(errOut, "came back") || !strings.Contains(errOut, id) {
		t.Fatalf("redrive during failures: exit %d after %v (consumer handled %d):\n%s%s", code, took, handled, out, errOut)
	}
	if took > 30*time.Second {
		t.Errorf("redrive took %v to see the loop", took)
	}
	recs := jsonLines(t, cli(t, env, "inspect", dlq, "-json"))
	if len(recs) != 1 || recs[0]["message_id"] != id {
		t.Errorf("the DLQ after the stopped redrive: %v", recs)
	}
	if n := len(c.Drain(queue, "")); n != 0 {
		t.Errorf("%d copies left on %s", n, queue)
	}
	t.Logf("stopped after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(errOut))
}

// TestIntegrationRedriveBypass: -bypass stamps bq-replay-bypass "true" on
// the redriven message; without it the message carries no such property,
// even when the record came from a bypassed replay.
func TestIntegrationRedriveBypass(t *testing.T) {
	env, c, queue, dlq := makeDeadLetters(t)
	out := cli(t, env, "redrive", dlq, "-bypass")
	if !strings.Contains(out, "done: 1 moved") {
		t.Fatalf("redrive -bypass:\n%s", out)
	}
	got := browseAll(t, env, queue)
	if len(got) != 1 || got[0].ApplicationProperties["bq-replay-bypass"] != "true" {
		t.Fatalf("the copy redriven with -bypass: %d messages, properties %v", len(got), propsOf(got))
	}
	consumeOnce(t, c, queue, 1) // it fails again
	out = cli(t, env, "redrive", dlq)
	if !strings.Contains(out, "done: 1 moved") {
		t.Fatalf("redrive:\n%s", out)
	}
	got = browseAll(t, env, queue)
	if len(got) != 1 {
		t.Fatalf("%d messages on %s, want 1", len(got), queue)
	}
	if v, ok := got[0].ApplicationProperties["bq-replay-bypass"]; ok {
		t.Errorf("the copy redriven without -bypass carries bq-replay-bypass=%v", v)
	}
}

func propsOf(msgs []*amqp.Message) []map[string]any {
	var out []map[string]any
	for _, m := range msgs {
		out = append(out, m.ApplicationProperties)
	}
	return out
}
