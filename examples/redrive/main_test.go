package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/exampletest"
)

func redriveRun(t *testing.T, cfg config) string {
	t.Helper()
	var out strings.Builder
	if err := run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("run %+v: %v\noutput:\n%s", cfg, err, out.String())
	}
	t.Logf("all=%v dry-run=%v:\n%s", cfg.All, cfg.DryRun, out.String())
	return out.String()
}

func reasons(t *testing.T, msgs []*amqp.Message) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, m := range msgs {
		var rec struct {
			DeadLetter *artemis.DeadLetter `json:"dead_letter"`
		}
		if err := json.Unmarshal([]byte(broker.BodyText(m)), &rec); err != nil || rec.DeadLetter == nil {
			t.Fatalf("not a dead-letter record: %s", broker.BodyText(m))
		}
		got[rec.DeadLetter.Reason]++
	}
	return got
}

func wantReasons(t *testing.T, got map[string]int, want ...string) {
	t.Helper()
	w := map[string]int{}
	for _, r := range want {
		w[r]++
	}
	if len(got) != len(w) {
		t.Fatalf("dead-letter records by reason %v, want %v", got, w)
	}
	for r, n := range w {
		if got[r] != n {
			t.Fatalf("dead-letter records by reason %v, want %v", got, w)
		}
	}
}

// checkRedriven asserts msg is env back on its queue as a fresh delivery:
// attempts 0, no dead_letter block, everything else as published.
func checkRedriven(t *testing.T, msg *amqp.Message, env *artemis.Envelope) {
	t.Helper()
	got, err := artemis.Decode([]byte(broker.BodyText(msg)))
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempts != 0 || got.DeadLetter != nil || got.Meta.ID != env.Meta.ID || got.TraceID != env.TraceID || got.Job != env.Job {
		t.Errorf("redriven envelope: attempts %d dead_letter %v meta.id %s trace_id %s job %s; want 0, none, %s %s %s",
			got.Attempts, got.DeadLetter, got.Meta.ID, got.TraceID, got.Job, env.Meta.ID, env.TraceID, env.Job)
	}
	if strings.Contains(broker.BodyText(msg), "dead_letter") {
		t.Errorf("the redriven body still has a dead_letter block: %s", broker.BodyText(msg))
	}
	if a := msg.ApplicationProperties[artemis.PropAttempts]; a != "0" {
		t.Errorf("%s = %v, want \"0\"", artemis.PropAttempts, a)
	}
	if u := msg.Annotations[artemis.AnnotationJMSType]; u != env.Job {
		t.Errorf("%s = %v, want %s", artemis.AnnotationJMSType, u, env.Job)
	}
}

func TestRedrive(t *testing.T) {
	url := exampletest.URL(t)
	queue := exampletest.Queue(t, "ex-redrive")
	dlq := queue + ".dlq"
	sess := exampletest.Session(t, url)
	exampletest.Purge(t, sess, queue, dlq)
	fx := exampletest.MakeDeadLetters(t, url, queue)
	cfg := config{URL: url, Queue: queue, Idle: time.Second, Timeout: time.Minute}

	// -dry-run lists and changes nothing.
	dry := cfg
	dry.DryRun = true
	out := redriveRun(t, dry)
	for _, want := range []string{
		"would move  " + exampletest.URNFailing + " meta.id " + fx.Failed.Meta.ID + " (reason failed) -> " + queue + " (attempts 0 -> 0)",
		"would keep  " + exampletest.URNUnknown + " meta.id " + fx.Unknown.Meta.ID + " (reason unknown_urn): reason unknown_urn (use -all to move it)",
		`would keep  poison record "` + exampletest.PoisonText + `": not a valid envelope, cannot be redriven`,
		"dry run, nothing was changed: 1 would move, 2 would stay",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the dry-run output lacks %q", want)
		}
	}
	wantReasons(t, reasons(t, exampletest.Browse(t, sess, dlq)), artemis.ReasonFailed, artemis.ReasonUnknownURN, artemis.ReasonPoison)
	if n := len(exampletest.Browse(t, sess, queue)); n != 0 {
		t.Fatalf("a dry run put %d messages on %s", n, queue)
	}

	// The default moves only the failed record.
	out = redriveRun(t, cfg)
	for _, want := range []string{
		"moved  " + exampletest.URNFailing + " meta.id " + fx.Failed.Meta.ID + " (reason failed) -> " + queue,
		"kept   " + exampletest.URNUnknown + " meta.id " + fx.Unknown.Meta.ID,
		`kept   poison record "` + exampletest.PoisonText + `"`,
		"done: 1 moved, 2 kept on " + dlq,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	back := exampletest.Take(t, sess, queue)
	if len(back) != 1 {
		t.Fatalf("%s got %d messages, want the failed one", queue, len(back))
	}
	checkRedriven(t, back[0], fx.Failed)
	// Byte for byte the envelope as first published: its unknown keys, the
	// big integer and the other SDK's meta.lang survive; so does the
	// out-of-band traceparent header.
	if body := broker.BodyText(back[0]); body != fx.FailedBody {
		t.Errorf("redriven body\n%s\nwant\n%s", body, fx.FailedBody)
	}
	if tp := back[0].ApplicationProperties["traceparent"]; tp != exampletest.Traceparent {
		t.Errorf("traceparent %v, want %s", tp, exampletest.Traceparent)
	}
	wantReasons(t, reasons(t, exampletest.Browse(t, sess, dlq)), artemis.ReasonUnknownURN, artemis.ReasonPoison)

	// -all moves the unknown_urn record too; the poison record stays.
	all := cfg
	all.All = true
	out = redriveRun(t, all)
	for _, want := range []string{
		"moved  " + exampletest.URNUnknown + " meta.id " + fx.Unknown.Meta.ID + " (reason unknown_urn) -> " + queue,
		`kept   poison record "` + exampletest.PoisonText + `": not a valid envelope, cannot be redriven`,
		"done: 1 moved, 1 kept on " + dlq,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the -all output lacks %q", want)
		}
	}
	back = exampletest.Take(t, sess, queue)
	if len(back) != 1 {
		t.Fatalf("%s got %d messages, want the unknown_urn one", queue, len(back))
	}
	checkRedriven(t, back[0], fx.Unknown)
	wantReasons(t, reasons(t, exampletest.Browse(t, sess, dlq)), artemis.ReasonPoison)
}

// TestRedriveTwiceIsStoredOnce plays a redrive that died between the
// publish and the accept: the record is still on the dead-letter queue
// although its copy already went out. Redriving it again sends the copy
// again, and Artemis's duplicate detection drops it: one copy arrives.
func TestRedriveTwiceIsStoredOnce(t *testing.T) {
	url := exampletest.URL(t)
	queue := exampletest.Queue(t, "ex-redrive-dup")
	dlq := queue + ".dlq"
	sess := exampletest.Session(t, url)
	exampletest.Purge(t, sess, queue, dlq)
	fx := exampletest.MakeDeadLetters(t, url, queue)

	// The same record a second time on the dead-letter queue.
	var failed *amqp.Message
	for _, m := range exampletest.Browse(t, sess, dlq) {
		if strings.Contains(broker.BodyText(m), `"reason":"failed"`) {
			failed = m
		}
	}
	if failed == nil {
		t.Fatal("no failed record on the dead-letter queue")
	}
	exampletest.Send(t, sess, dlq, &amqp.Message{
		Header:                &amqp.MessageHeader{Durable: true, Priority: 4},
		Annotations:           failed.Annotations,
		Properties:            failed.Properties,
		ApplicationProperties: failed.ApplicationProperties,
		Value:                 broker.BodyText(failed),
	})

	out := redriveRun(t, config{URL: url, Queue: queue, Idle: time.Second, Timeout: time.Minute})
	if !strings.Contains(out, "done: 2 moved, 2 kept on "+dlq) {
		t.Errorf("want both copies of the record moved off %s", dlq)
	}
	back := exampletest.Take(t, sess, queue)
	if len(back) != 1 {
		t.Fatalf("%s got %d copies of the redriven record, want 1", queue, len(back))
	}
	checkRedriven(t, back[0], fx.Failed)
}
