// Command dlq-inspect lists the records on a dead-letter queue without
// consuming them: for each, the dead_letter block's reason, error,
// exception, original_queue, attempts and failed_at, and the envelope's URN
// and meta.id (a poison record shows its raw body instead).
//
//	cd examples && go run ./dlq-inspect [-queue orders] [-json]
//
// It reads <queue>.dlq in browse mode: a go-amqp receiver whose source asks
// for the "copy" distribution mode. Artemis then sends copies and leaves
// every message on the queue; settling a copy (accept or release) changes
// nothing on the broker. The copies are requested pre-settled, so credit
// keeps flowing without a disposition per record. AMQP gives a browser no
// end-of-queue mark (and Artemis does not answer go-amqp's drain, which
// asks with zero credit), so the queue counts as read once no record has
// come for -idle.
//
// The broker is ARTEMIS_URL (default amqp://babel:babel@127.0.0.1:5672).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
)

type config struct {
	URL     string
	Queue   string // the DLQ is Queue + ".dlq"
	JSON    bool
	Idle    time.Duration
	Timeout time.Duration
}

func main() {
	cfg := config{URL: broker.URL()}
	flag.StringVar(&cfg.Queue, "queue", "orders", "the queue whose dead-letter queue (<queue>.dlq) to list")
	flag.BoolVar(&cfg.JSON, "json", false, "print one JSON document instead of text")
	flag.DurationVar(&cfg.Idle, "idle", time.Second, "the queue counts as read once no record has come for this long")
	flag.DurationVar(&cfg.Timeout, "timeout", time.Minute, "give up after this long")
	flag.Parse()

	broker.Main("dlq-inspect", func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
}

// Record is what the example shows of one dead-letter record.
type Record struct {
	Reason        string  `json:"reason"` // failed, unknown_urn, poison; "" without a dead_letter block
	Error         *string `json:"error"`
	Exception     *string `json:"exception"`
	OriginalQueue string  `json:"original_queue"`
	Attempts      int     `json:"attempts"`
	FailedAt      int64   `json:"failed_at"` // Unix ms
	URN           string  `json:"urn"`       // job, else urn, else the x-opt-jms-type annotation
	MetaID        string  `json:"meta_id"`
	TraceID       string  `json:"trace_id"`
	// Redrivable: the record is a valid envelope, so it can be published
	// to its queue again (a poison record usually is not).
	Redrivable  bool    `json:"redrivable"`
	Raw         *string `json:"raw,omitempty"` // a poison record's original body
	RawEncoding string  `json:"raw_encoding,omitempty"`
	// Problem says why the record could not be read in full.
	Problem string `json:"problem,omitempty"`
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	dlq := cfg.Queue + ".dlq"

	conn, sess, err := broker.Session(ctx, cfg.URL)
	if err != nil {
		return err
	}
	defer conn.Close()
	msgs, err := broker.Browse(ctx, sess, dlq, cfg.Idle)
	if err != nil {
		return err
	}
	records := make([]Record, len(msgs))
	for i, m := range msgs {
		records[i] = parseRecord(m)
	}

	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			DLQ     string   `json:"dlq"`
			Count   int      `json:"count"`
			Records []Record `json:"records"`
		}{dlq, len(records), records})
	}
	fmt.Fprintf(out, "%s: %d records (browsed: nothing was consumed)\n", dlq, len(records))
	for i, r := range records {
		printRecord(out, i+1, r)
	}
	return nil
}

// parseRecord reads a record leniently: a poison record is whatever
// arrived, so each field is taken when it is there and of the right type.
func parseRecord(msg *amqp.Message) Record {
	var r Record
	body := broker.BodyText(msg)
	if env, err := artemis.Decode([]byte(body)); err == nil && env.Validate() == nil {
		r.Redrivable = true
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		r.Problem = "the body is not a JSON object"
		raw := body
		r.Raw = &raw
	}
	if dl, ok := top["dead_letter"]; ok {
		var block artemis.DeadLetter
		if err := json.Unmarshal(dl, &block); err != nil {
			r.Problem = "dead_letter: " + err.Error()
		}
		r.Reason, r.Error, r.Exception = block.Reason, block.Error, block.Exception
		r.OriginalQueue, r.Attempts, r.FailedAt = block.OriginalQueue, block.Attempts, block.FailedAt
	} else if r.Problem == "" {
		// Artemis's own dead-lettering, or a message forwarded as
		// received (a bq_schema_version the consumer does not speak).
		r.Problem = "no dead_letter block"
	}
	r.URN = stringField(top["job"])
	if r.URN == "" {
		r.URN = stringField(top["urn"])
	}
	if r.URN == "" {
		r.URN, _ = msg.Annotations[artemis.AnnotationJMSType].(string)
	}
	r.TraceID = stringField(top["trace_id"])
	var meta map[string]json.RawMessage
	if json.Unmarshal(top["meta"], &meta) == nil {
		r.MetaID = stringField(meta["id"])
	}
	if raw, ok := top["raw"]; ok {
		s := stringField(raw)
		r.Raw = &s
		r.RawEncoding = stringField(top["raw_encoding"])
	}
	return r
}

func printRecord(out io.Writer, n int, r Record) {
	fmt.Fprintf(out, "%d. reason %s  urn %s  meta.id %s  attempts %d  original_queue %s\n",
		n, orDash(r.Reason), orDash(r.URN), orDash(r.MetaID), r.Attempts, orDash(r.OriginalQueue))
	if r.FailedAt != 0 {
		fmt.Fprintf(out, "   failed at %s", time.UnixMilli(r.FailedAt).UTC().Format("2006-01-02T15:04:05.000Z"))
	} else {
		fmt.Fprint(out, "   failed at -")
	}
	fmt.Fprintf(out, ": %s", orDash(deref(r.Error)))
	if r.Exception != nil {
		fmt.Fprintf(out, " (%s)", *r.Exception)
	}
	fmt.Fprintln(out)
	if r.Raw != nil {
		enc := ""
		if r.RawEncoding != "" {
			enc = " (" + r.RawEncoding + ")"
		}
		fmt.Fprintf(out, "   raw%s: %q\n", enc, truncate(*r.Raw, 200))
	}
	switch {
	case r.Problem != "":
		fmt.Fprintf(out, "   note: %s\n", r.Problem)
	case !r.Redrivable:
		fmt.Fprintln(out, "   note: not a valid envelope, cannot be redriven")
	}
}

func stringField(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// truncate keeps the first n runes of s.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "..."
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
