package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// untilLines runs the tool until its -json output has want lines, within
// a bound: the broker moves a message to DLQ or ExpiryQueue on its own
// time.
func untilLines(t *testing.T, env map[string]string, want int, args ...string) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines := jsonLines(t, cli(t, env, args...))
		if len(lines) == want || time.Now().After(deadline) {
			if len(lines) != want {
				t.Fatalf("bqartemis %v: %d lines, want %d: %v", args, len(lines), want, lines)
			}
			return lines
		}
	}
}

// An unknown URN (a producer's typo) that a consumer with the default
// strategy (UnknownURNFail: modified, delivery-failed) hands back until
// the broker's max-delivery-attempts ends on the broker's DLQ: inspect
// lists it by the queue it came from, redrive puts it back there whole.
func TestIntegrationBrokerDeadLetterRedrive(t *testing.T) {
	env := brokerEnv(t)
	c := brokertest.Require(t).Dial(t)
	queue := brokertest.Queue(t)
	id := strings.TrimSpace(cli(t, env, "publish", queue, urnUnknown, `{"order_id":7}`, "-header", "traceparent=00-aa-bb-01"))

	cons, err := artemis.NewConsumer(artemis.Handlers{
		urnFail: func(context.Context, *artemis.Envelope, *amqp.Message) error { return nil },
	}, artemis.WithQueue(queue), artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
	if err != nil {
		t.Fatal(err)
	}
	r := c.NewReceiver(queue, &brokertest.ReceiverOptions{Credit: 1})
	rounds := 0
	for ; rounds < 50; rounds++ { // max-delivery-attempts is 10
		msg := c.Receive(r, 3*time.Second)
		if msg == nil {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
		_ = cons.Handle(ctx, r, msg)
		cancel()
	}
	c.CloseReceiver(r)
	if rounds == 0 || rounds == 50 {
		t.Fatalf("the message went round %d times", rounds)
	}

	lines := untilLines(t, env, 1, "inspect", "DLQ", "-from", queue, "-json")
	l := lines[0]
	if l["reason"] != reasonUndelivered || l["orig_queue"] != queue || l["orig_address"] != queue || l["urn"] != urnUnknown || l["message_id"] != id {
		t.Fatalf("the broker's dead letter: %v", l)
	}
	_, errOut, _ := runCLI(t, env, "", "inspect", "DLQ", "-from", queue)
	if !strings.Contains(errOut, "moved them from: "+queue+" 1") {
		t.Errorf("inspect's grouping: %q", errOut)
	}
	dry := cli(t, env, "redrive", "DLQ", "-from", queue, "-dry-run")
	if !strings.Contains(dry, "would move  envelope "+urnUnknown+" id="+id+" -> "+queue) || !strings.Contains(dry, "1 would move") {
		t.Errorf("dry run:\n%s", dry)
	}
	out := cli(t, env, "redrive", "DLQ", "-from", queue)
	if !strings.Contains(out, "moved  envelope "+urnUnknown) || !strings.Contains(out, "done: 1 moved") {
		t.Errorf("redrive:\n%s", out)
	}
	back := c.Drain(queue, "")
	if len(back) != 1 {
		t.Fatalf("%d messages back on %s, want 1", len(back), queue)
	}
	m := back[0]
	rec := readRecord(m)
	if rec.MessageID != id || rec.URN != urnUnknown || rec.OrigQueue != "" || m.ApplicationProperties["traceparent"] != "00-aa-bb-01" {
		t.Errorf("the message back: %+v %v %v", rec, m.Annotations, m.ApplicationProperties)
	}
	if got := jsonLines(t, cli(t, env, "inspect", "DLQ", "-from", queue, "-json")); len(got) != 0 {
		t.Errorf("still on DLQ: %v", got)
	}
}

// A message whose time-to-live ran out is on the broker's ExpiryQueue:
// inspect lists it (reason expired), redrive puts it back without the
// used-up expiry, so it is not expired again.
func TestIntegrationBrokerExpiredRedrive(t *testing.T) {
	env := brokerEnv(t)
	c := brokertest.Require(t).Dial(t)
	queue := brokertest.Queue(t)
	id := strings.TrimSpace(cli(t, env, "publish", queue, urnFail, `{"order_id":8}`, "-ttl", "20ms"))
	// A consumer's attach makes the broker look at the queue and expire
	// what is due (its own scan would also come, later).
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := c.NewReceiver(queue, &brokertest.ReceiverOptions{Credit: 1})
		msg := c.Receive(r, 500*time.Millisecond)
		if msg != nil {
			_ = r.ReleaseMessage(context.Background(), msg)
		}
		c.CloseReceiver(r)
		if msg == nil || time.Now().After(deadline) {
			break
		}
	}
	lines := untilLines(t, env, 1, "inspect", "ExpiryQueue", "-from", queue, "-json", "-reason", reasonExpired, "-since", "1h")
	if l := lines[0]; l["orig_queue"] != queue || l["message_id"] != id || l["expired_at"] == nil {
		t.Fatalf("the expired message: %v", l)
	}
	out := cli(t, env, "redrive", "ExpiryQueue", "-from", queue)
	if !strings.Contains(out, "moved  envelope "+urnFail+" id="+id+" -> "+queue+" (as the broker took it, expired)") {
		t.Errorf("redrive:\n%s", out)
	}
	time.Sleep(100 * time.Millisecond) // longer than the old ttl: the copy must not expire
	back := c.Drain(queue, "")
	if len(back) != 1 || readRecord(back[0]).MessageID != id {
		t.Fatalf("back on %s: %v", queue, back)
	}
	if h := back[0].Header; h != nil && h.TTL != 0 {
		t.Errorf("the copy kept a ttl: %v", h.TTL)
	}
}

// remove lists first and changes nothing; -yes takes exactly the records
// that match and leaves the others, their delivery counts untouched.
func TestIntegrationRemove(t *testing.T) {
	env, _, _, dlq := makeDeadLetters(t)

	dry := cli(t, env, "remove", dlq, "-reason", "poison")
	if !strings.Contains(dry, "would remove  poison") || !strings.Contains(dry, "1 would be removed, 3 would stay") {
		t.Errorf("dry run:\n%s", dry)
	}
	if st := statOf(t, env, dlq); st["messages"] != 4.0 {
		t.Fatalf("the dry run changed %s: %v", dlq, st)
	}
	out := cli(t, env, "remove", dlq, "-reason", "poison", "-yes")
	if !strings.Contains(out, "removed  poison") || !strings.Contains(out, "done: 1 removed, 3 kept") {
		t.Errorf("remove:\n%s", out)
	}
	left := jsonLines(t, cli(t, env, "peek", dlq, "-json"))
	if len(left) != 3 {
		t.Fatalf("%d left, want 3: %v", len(left), left)
	}
	var failedID string
	for _, l := range left {
		if l["kind"] == kindPoison {
			t.Errorf("a poison record stayed: %v", l)
		}
		if l["delivery_count"] != 0.0 {
			t.Errorf("a kept record's delivery count changed: %v", l)
		}
		if l["reason"] == artemis.ReasonFailed {
			failedID = l["message_id"].(string)
		}
	}
	out, errOut, code := runCLI(t, env, "", "remove", dlq, "-id", failedID+",no-such-id", "-yes")
	if code != exitOK || !strings.Contains(out, "done: 1 removed, 2 kept") || !strings.Contains(errOut, "no record of id no-such-id") {
		t.Errorf("remove -id: exit %d\n%s%s", code, out, errOut)
	}
	if st := statOf(t, env, dlq); st["messages"] != 2.0 {
		t.Errorf("after removing two: %v", st)
	}
}

// A count says how many the queue holds, also when -max stopped early.
func TestIntegrationCounts(t *testing.T) {
	env := brokerEnv(t)
	queue := brokertest.Queue(t)
	cli(t, env, "publish", queue, urnFail, `{}`)
	cli(t, env, "publish", queue, urnFail, `{}`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"peek", queue, "-max", "1"}, "1 of 2 messages on " + queue},
		{[]string{"peek", queue}, "2 of 2 messages on " + queue},
		{[]string{"inspect", queue, "-max", "1"}, "1 of 2 records on " + queue},
		{[]string{"inspect", queue, "-reason", "failed"}, "0 of 2 records on " + queue},
	} {
		_, errOut, code := runCLI(t, env, "", tc.args...)
		if code != exitOK || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}
