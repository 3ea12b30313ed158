package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/exampletest"
)

func TestInspect(t *testing.T) {
	url := exampletest.URL(t)
	queue := exampletest.Queue(t, "ex-inspect")
	dlq := queue + ".dlq"
	sess := exampletest.Session(t, url)
	exampletest.Purge(t, sess, dlq)
	fx := exampletest.MakeDeadLetters(t, url, queue)
	cfg := config{URL: url, Queue: queue, Idle: time.Second, Timeout: time.Minute}

	// -json: every field of every record.
	var out strings.Builder
	cfg.JSON = true
	if err := run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("run -json: %v", err)
	}
	var doc struct {
		DLQ     string   `json:"dlq"`
		Count   int      `json:"count"`
		Records []Record `json:"records"`
	}
	if err := json.Unmarshal([]byte(out.String()), &doc); err != nil {
		t.Fatalf("-json output does not parse: %v\n%s", err, out.String())
	}
	if doc.DLQ != dlq || doc.Count != 3 || len(doc.Records) != 3 {
		t.Fatalf("dlq %q count %d records %d, want %q 3 3\n%s", doc.DLQ, doc.Count, len(doc.Records), dlq, out.String())
	}
	byReason := map[string]Record{}
	for _, r := range doc.Records {
		byReason[r.Reason] = r
		if r.OriginalQueue != queue || r.Attempts != 0 || r.FailedAt == 0 {
			t.Errorf("%s record: original_queue %q attempts %d failed_at %d, want %q 0 set", r.Reason, r.OriginalQueue, r.Attempts, r.FailedAt, queue)
		}
	}
	failed := byReason[artemis.ReasonFailed]
	if failed.URN != exampletest.URNFailing || failed.MetaID != fx.Failed.Meta.ID || failed.TraceID != fx.Failed.TraceID ||
		deref(failed.Error) != exampletest.FailingError || deref(failed.Exception) != "error" || !failed.Redrivable {
		t.Errorf("failed record: %+v", failed)
	}
	unknown := byReason[artemis.ReasonUnknownURN]
	if unknown.URN != exampletest.URNUnknown || unknown.MetaID != fx.Unknown.Meta.ID || !unknown.Redrivable ||
		!strings.Contains(deref(unknown.Error), exampletest.URNUnknown) {
		t.Errorf("unknown_urn record: %+v", unknown)
	}
	poison := byReason[artemis.ReasonPoison]
	if poison.Raw == nil || *poison.Raw != exampletest.PoisonText || poison.Redrivable || poison.URN != "" || poison.MetaID != "" ||
		!strings.Contains(deref(poison.Error), "not valid JSON") {
		t.Errorf("poison record: %+v", poison)
	}

	// Text: one block per record.
	out.Reset()
	cfg.JSON = false
	if err := run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("run: %v", err)
	}
	text := out.String()
	t.Logf("output:\n%s", text)
	for _, want := range []string{
		dlq + ": 3 records (browsed: nothing was consumed)",
		"reason failed  urn " + exampletest.URNFailing + "  meta.id " + fx.Failed.Meta.ID + "  attempts 0  original_queue " + queue,
		": " + exampletest.FailingError + " (error)",
		"reason unknown_urn  urn " + exampletest.URNUnknown + "  meta.id " + fx.Unknown.Meta.ID,
		"reason poison  urn -  meta.id -  attempts 0  original_queue " + queue,
		`raw: "` + exampletest.PoisonText + `"`,
		"note: not a valid envelope, cannot be redriven",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the output lacks %q", want)
		}
	}

	// Browsing consumed nothing: all three records are still there.
	if n := len(exampletest.Browse(t, sess, dlq)); n != 3 {
		t.Errorf("%s holds %d records after two inspections, want 3", dlq, n)
	}
}

func TestInspectEmpty(t *testing.T) {
	url := exampletest.URL(t)
	queue := exampletest.Queue(t, "ex-inspect-empty")
	var out strings.Builder
	if err := run(context.Background(), config{URL: url, Queue: queue, Idle: time.Second, Timeout: time.Minute}, &out); err != nil {
		t.Fatalf("run: %v", err)
	}
	if want := queue + ".dlq: 0 records (browsed: nothing was consumed)\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}
