package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

const (
	urnFail    = "urn:babel:tool:fail"
	urnUnknown = "urn:babel:tool:unknown"
)

// brokerEnv is the tool's environment for the test broker: the URL
// without its password, the password in $ARTEMIS_PASSWORD.
func brokerEnv(t *testing.T) map[string]string {
	b := brokertest.Require(t)
	u, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := u.User.Password()
	if pass == "" {
		pass = b.Password
	}
	u.User = url.User(u.User.Username())
	return map[string]string{envURL: u.String(), envPassword: pass}
}

// cli runs the tool and fails the test unless it exits 0, with its whole
// stdout and stderr quoted on the failure's one line (CI keeps only the
// lines that start with a test file's name and line).
func cli(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	out, errOut, code := runCLI(t, env, "", args...)
	if code != exitOK {
		t.Fatalf("bqartemis %v: exit %d; stdout %q; stderr %q", args, code, out, errOut)
	}
	return out
}

func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// consumeOnce lets the library's consumer handle n deliveries of queue:
// urnFail fails at once (max tries 1), urnUnknown has no handler
// (dead-lettered), poison and gated messages go to the DLQ as the
// contract says.
func consumeOnce(t *testing.T, c *brokertest.Conn, queue string, n int) {
	t.Helper()
	dlq := c.NewSender(queue + ".dlq")
	cons, err := artemis.NewConsumer(artemis.Handlers{
		urnFail: func(context.Context, *artemis.Envelope, *amqp.Message) error { return errors.New("gateway timeout") },
	}, artemis.WithDeadLetterSender(dlq), artemis.WithMaxTries(1), artemis.WithQueue(queue),
		artemis.WithUnknownURN(artemis.UnknownURNDeadLetter), artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
	if err != nil {
		t.Fatal(err)
	}
	r := c.NewReceiver(queue, &brokertest.ReceiverOptions{Credit: 1})
	defer c.CloseReceiver(r)
	for i := 0; i < n; i++ {
		msg := c.Receive(r, 20*time.Second)
		if msg == nil {
			t.Fatalf("delivery %d of %d did not come", i+1, n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
		err := cons.Handle(ctx, r, msg)
		cancel()
		_ = err // the failures are the point; the DLQ contents are checked
	}
}

// makeDeadLetters returns the tool's environment for the test broker, a
// connection to it, and a fresh queue whose queue.dlq (the last result)
// holds four records: failed, unknown_urn, poison and a gated forward.
func makeDeadLetters(t *testing.T) (env map[string]string, c *brokertest.Conn, queue, dlq string) {
	t.Helper()
	env = brokerEnv(t)
	c = brokertest.Require(t).Dial(t)
	queue = brokertest.Queue(t)
	cli(t, env, "publish", queue, urnFail, `{"order_id":1}`, "-header", "traceparent=00-aa-bb-01")
	cli(t, env, "publish", queue, urnUnknown, `{"order_id":2}`)
	c.Send(queue, &amqp.Message{Value: "not json <at all>"})
	c.Send(queue, &amqp.Message{Value: `{"job":"urn:babel:tool:v2","trace_id":"t","data":{},"meta":{"id":"m2","schema_version":2},"attempts":0}`,
		ApplicationProperties: map[string]any{artemis.PropSchemaVersion: "2"}})
	consumeOnce(t, c, queue, 4)
	return env, c, queue, queue + ".dlq"
}

func statOf(t *testing.T, env map[string]string, queue string) map[string]any {
	t.Helper()
	lines := jsonLines(t, cli(t, env, "stats", queue, "-json"))
	if len(lines) != 1 || lines[0]["queue"] != queue {
		t.Fatalf("stats %s: %v", queue, lines)
	}
	return lines[0]
}

func TestIntegrationInspect(t *testing.T) {
	env, _, queue, dlq := makeDeadLetters(t)

	lines := jsonLines(t, cli(t, env, "inspect", dlq, "-json"))
	kinds := map[string]map[string]any{}
	for _, l := range lines {
		kinds[l["kind"].(string)+"/"+l["reason"].(string)] = l
	}
	if len(lines) != 4 || len(kinds) != 4 {
		t.Fatalf("want 4 records of 4 kinds, got %v", lines)
	}
	failed := kinds["dead_letter/failed"]
	if failed == nil || failed["error"] != "gateway timeout" || failed["urn"] != urnFail || failed["original_queue"] != queue ||
		failed["attempts"] != 0.0 || failed["exception"] == nil || failed["failed_at"] == nil || failed["trace_id"] == "" {
		t.Errorf("failed record: %v", failed)
	}
	if u := kinds["dead_letter/unknown_urn"]; u == nil || u["urn"] != urnUnknown || u["exception"] != nil {
		t.Errorf("unknown_urn record: %v", u)
	}
	if p := kinds["poison/poison"]; p == nil || p["raw"] != "not json <at all>" {
		t.Errorf("poison record: %v", p)
	}
	if g := kinds["gated/gated"]; g == nil || g["bq_schema_version"] != "2" || g["failed_at"] != nil {
		t.Errorf("gated forward: %v", g)
	}

	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-reason", "failed"}, 1},
		{[]string{"-reason", "gated"}, 1},
		{[]string{"-urn", urnUnknown}, 1},
		{[]string{"-since", "1h"}, 3}, // the gated forward has no failed_at
		{[]string{"-max", "2"}, 2},
	} {
		got := jsonLines(t, cli(t, env, append([]string{"inspect", dlq, "-json"}, tc.args...)...))
		if len(got) != tc.want {
			t.Errorf("inspect %v: %d records, want %d", tc.args, len(got), tc.want)
		}
	}
	text := cli(t, env, "inspect", dlq)
	if n := strings.Count(text, "\n"); n != 4 || !strings.Contains(text, "reason=failed") || !strings.Contains(text, `raw="not json <at all>"`) {
		t.Errorf("text form:\n%s", text)
	}
	if st := statOf(t, env, dlq); st["messages"] != 4.0 {
		t.Errorf("inspect consumed something: %v", st)
	}
}

func TestIntegrationRedrive(t *testing.T) {
	env, c, queue, dlq := makeDeadLetters(t)

	dry := cli(t, env, "redrive", dlq, "-dry-run")
	if !strings.Contains(dry, "would move  dead_letter "+urnFail) || !strings.Contains(dry, "1 would move, 3 would stay") {
		t.Errorf("dry run:\n%s", dry)
	}
	if st := statOf(t, env, dlq); st["messages"] != 4.0 {
		t.Fatalf("the dry run changed the DLQ: %v", st)
	}

	// A run that stopped after its publish and before its accept: the
	// copy is on the queue already, the record still on the DLQ.
	var rec *amqp.Message
	err := browse(context.Background(), mustDial(t, env), dlq, time.Second, func(m *amqp.Message) (bool, error) {
		if readRecord(m).URN == urnFail {
			rec = m
			return false, nil
		}
		return true, nil
	})
	if err != nil || rec == nil {
		t.Fatalf("browse for the failed record: %v", err)
	}
	plan := (&redriveFlags{}).plan(rec, dlq)
	c.Send(queue, plan.msg)

	out := cli(t, env, "redrive", dlq)
	if !strings.Contains(out, "moved  dead_letter "+urnFail) || !strings.Contains(out, "done: 1 moved, 3 kept") {
		t.Errorf("redrive:\n%s", out)
	}
	// Stored once (the re-publish was a duplicate), attempts 0, no block,
	// the header kept; the three others back on the DLQ, uncounted.
	got := browseAll(t, env, queue)
	if len(got) != 1 {
		t.Fatalf("the queue holds %d copies, want 1", len(got))
	}
	moved := readRecord(got[0])
	body := got[0].Value.(string)
	if moved.Kind != kindEnvelope || moved.Attempts != 0 || strings.Contains(body, "dead_letter") ||
		got[0].ApplicationProperties["traceparent"] != "00-aa-bb-01" || got[0].ApplicationProperties[artemis.PropAttempts] != "0" {
		t.Errorf("the redriven copy: %+v %s %v", moved, body, got[0].ApplicationProperties)
	}
	for _, l := range jsonLines(t, cli(t, env, "peek", dlq, "-json")) {
		if l["delivery_count"] != 0.0 {
			t.Errorf("a kept record was counted as a failed delivery: %v", l)
		}
	}

	// It fails again: it reaches the DLQ again, and a second redrive moves it again.
	consumeOnce(t, c, queue, 1)
	if n := len(jsonLines(t, cli(t, env, "inspect", dlq, "-json", "-reason", "failed"))); n != 1 {
		t.Fatalf("the second failure did not reach the DLQ: %d failed records", n)
	}
	if out := cli(t, env, "redrive", dlq, "-max", "1"); !strings.Contains(out, "done: 1 moved") {
		t.Errorf("second redrive:\n%s", out)
	}
	if n := len(c.Drain(queue, "")); n != 1 {
		t.Errorf("the second redrive stored %d copies, want 1", n)
	}
	// What -max left, and what did not match, went back uncounted.
	left := jsonLines(t, cli(t, env, "peek", dlq, "-json"))
	if len(left) != 3 {
		t.Errorf("after -max 1 the DLQ holds %d records, want 3", len(left))
	}
	for _, l := range left {
		if l["delivery_count"] != 0.0 {
			t.Errorf("a record left by -max was counted as a failed delivery: %v", l)
		}
	}

	// -all -to: unknown_urn moves to another queue; poison and gated stay.
	other := queue + ".other"
	c.NewSender(other) // -to names a queue that exists: redrive creates none
	out = cli(t, env, "redrive", dlq, "-all", "-to", other)
	if !strings.Contains(out, "done: 1 moved, 2 kept") || !strings.Contains(out, "poison record is not an envelope") || !strings.Contains(out, "gated forward") {
		t.Errorf("redrive -all:\n%s", out)
	}
	if n := len(c.Drain(other, "")); n != 1 {
		t.Errorf("-to %s holds %d, want 1", other, n)
	}
	if st := statOf(t, env, dlq); st["messages"] != 2.0 {
		t.Errorf("the DLQ after -all: %v", st)
	}
}

func browseAll(t *testing.T, env map[string]string, queue string) []*amqp.Message {
	t.Helper()
	var msgs []*amqp.Message
	err := browse(context.Background(), mustDial(t, env), queue, time.Second, func(m *amqp.Message) (bool, error) {
		msgs = append(msgs, m)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func mustDial(t *testing.T, env map[string]string) *session {
	t.Helper()
	cf := connFlags{getenv: func(k string) string { return env[k] }, timeout: time.Minute}
	s, err := cf.dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestIntegrationPublishPeekStats(t *testing.T) {
	env := brokerEnv(t)
	c := brokertest.Require(t).Dial(t)
	queue := brokertest.Queue(t)

	id := strings.TrimSpace(cli(t, env, "publish", queue, "urn:babel:orders:created", `{"order_id": 9007199254740993}`,
		"-trace-id", "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b", "-header", "traceparent=00-x-y-01", "-group", "g7", "-ttl", "1h", "-priority", "8", "-dup-detect"))
	out, errOut, code := runCLI(t, env, `{"from":"stdin"}`, "publish", queue, "urn:babel:orders:stdin", "-")
	if code != exitOK {
		t.Fatalf("publish -: %d %s", code, errOut)
	}
	cli(t, env, "publish", queue, "urn:babel:orders:later", "-delay", "1h")

	lines := jsonLines(t, cli(t, env, "peek", queue, "-json"))
	if len(lines) != 2 { // the scheduled one is not browsable before its time
		t.Fatalf("peek: %v", lines)
	}
	first := lines[0]
	for k, v := range map[string]any{"message_id": id, "trace_id": "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b", "urn": "urn:babel:orders:created",
		"group_id": "g7", "ttl": 3600000.0, "priority": 8.0, "attempts": 0.0, "delivery_count": 0.0} {
		if first[k] != v {
			t.Errorf("peek %s = %#v, want %#v", k, first[k], v)
		}
	}
	props := first["properties"].(map[string]any)
	if props["traceparent"] != "00-x-y-01" || props[artemis.PropDuplicateID] != id {
		t.Errorf("properties: %v", props)
	}
	raw, _ := json.Marshal(first["body"])
	if !strings.Contains(cli(t, env, "peek", queue, "-json", "-max", "1"), `"order_id":9007199254740993`) || len(raw) == 0 {
		t.Errorf("the big integer did not survive")
	}
	if lines[1]["message_id"] != strings.TrimSpace(out) || lines[1]["urn"] != "urn:babel:orders:stdin" {
		t.Errorf("the stdin publish: %v", lines[1])
	}

	// The same publish again with -dup-detect is stored once: send the
	// first message's id again through a raw copy.
	st := statOf(t, env, queue)
	if st["messages"] != 3.0 || st["scheduled"] != 1.0 || st["added"] != 3.0 || st["consumers"] != 0.0 || st["delivering"] != 0.0 {
		t.Errorf("stats: %v", st)
	}
	sched := jsonLines(t, cli(t, env, "scheduled", queue, "-json"))
	if len(sched) != 1 || sched[0]["urn"] != "urn:babel:orders:later" || sched[0]["attempts"] != 0.0 || sched[0]["id"] == "" {
		t.Errorf("scheduled: %v", sched)
	} else if due, err := time.Parse(time.RFC3339, sched[0]["due"].(string)); err != nil || time.Until(due) < 50*time.Minute {
		t.Errorf("scheduled due %v (%v), want about an hour from now", sched[0]["due"], err)
	}
	r := c.NewReceiver(queue, &brokertest.ReceiverOptions{Credit: 1})
	msg := c.Receive(r, 20*time.Second)
	if msg == nil {
		t.Fatal("nothing to receive")
	}
	if st := statOf(t, env, queue); st["consumers"] != 1.0 || st["delivering"] != 1.0 {
		t.Errorf("stats with a consumer holding one: %v", st)
	}
	c.Accept(r, msg)
	c.CloseReceiver(r)

	table := cli(t, env, "stats")
	if !strings.Contains(table, "QUEUE") || !strings.Contains(table, queue) || strings.Contains(table, "$sys") {
		t.Errorf("stats table:\n%s", table)
	}
	if _, errOut, code := runCLI(t, env, "", "stats", queue+".nope"); code != exitFailed || !strings.Contains(errOut, "no such queue") {
		t.Errorf("stats of a missing queue: exit %d %s", code, errOut)
	}
}

// A wrong password is refused, and neither it nor the right one shows.
func TestIntegrationBadPasswordIsNotShown(t *testing.T) {
	env := brokerEnv(t)
	env[envPassword] = "wr0ng-s3cret"
	_, errOut, code := runCLI(t, env, "", "stats")
	if code != exitFailed || strings.Contains(errOut, "wr0ng-s3cret") || !strings.Contains(errOut, "cannot connect") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// A live/backup list: the first URL is down, the second answers.
func TestIntegrationURLListFallsBack(t *testing.T) {
	env := brokerEnv(t)
	live := env[envURL]
	delete(env, envURL)
	out := cli(t, env, "stats", "DLQ", "-url", "amqp://babel@127.0.0.1:1", "-url", live)
	if !strings.Contains(out, "DLQ") {
		t.Errorf("stats over the backup URL:\n%s", out)
	}
	_, errOut, code := runCLI(t, env, "", "stats", "-url", "amqp://babel@127.0.0.1:1", "-url", "amqp://babel@127.0.0.1:2")
	if code != exitFailed || !strings.Contains(errOut, "127.0.0.1:1") || !strings.Contains(errOut, "127.0.0.1:2") {
		t.Errorf("two dead URLs: exit %d %s", code, errOut)
	}
}

// TestIntegrationPeekPersonalData: peek with the registry's schemas lists
// the x-gdpr-sensitive fields of a message on the broker, encrypted or in
// clear, and -mask prints none of their values.
func TestIntegrationPeekPersonalData(t *testing.T) {
	env := brokerEnv(t)
	queue := brokertest.Queue(t)
	const ct = "7tcpi/KthBAm+6O98qyY2SpyMO26/YKFzAyl0leZbmI03yr/ZyC3lCfpFL8uPaQ="
	cli(t, env, "publish", queue, "urn:babel:users:registered", `{"user_id":7,"email":"`+ct+`","phone":"+90 555 123 4567","locale":"tr-TR"}`)

	lines := jsonLines(t, cli(t, env, "peek", queue, "-json", "-registry", exampleRegistry, "-mask"))
	if len(lines) != 1 {
		t.Fatalf("peek: %v", lines)
	}
	p, _ := lines[0]["personal"].(map[string]any)
	if p == nil || !reflect.DeepEqual(p["encrypted"], []any{"email"}) || !reflect.DeepEqual(p["clear"], []any{"phone"}) || lines[0]["masked"] != true {
		t.Errorf("personal %v masked %v", lines[0]["personal"], lines[0]["masked"])
	}
	body, _ := json.Marshal(lines[0]["body"])
	if strings.Contains(string(body), "555") || strings.Contains(string(body), "7tcpi/K") || !strings.Contains(string(body), `"phone":"+***"`) {
		t.Errorf("masked body %s", body)
	}
	text := cli(t, env, "peek", queue, "-registry", exampleRegistry)
	if !strings.Contains(text, "personal_encrypted=email personal_in_clear=phone") {
		t.Errorf("peek text: %s", text)
	}
	if _, errOut, code := runCLI(t, env, "", "peek", queue, "-mask"); code != exitUsage || !strings.Contains(errOut, "-mask needs -schemas DIR or -registry FILE") {
		t.Errorf("-mask alone: exit %d %s", code, errOut)
	}
}
