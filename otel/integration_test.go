package otel

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The broker tests run when ARTEMIS_URL is set (scripts/artemis start);
// the Python producer's when BQ_PYTHON names the python of the SDK's venv
// (scripts/python-peer setup prints it).

func brokerURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("ARTEMIS_URL")
	if u == "" {
		t.Skip("ARTEMIS_URL not set: the broker tests of the otel module need a running Artemis (eval \"$(scripts/artemis start)\")")
	}
	return u
}

func freshQueue(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + "." + hex.EncodeToString(b)
}

// consuming runs client.Consume of tel's wrapped handler on queue in the
// background; each delivery the handler saw goes to the returned channel.
func consuming(t *testing.T, ctx context.Context, tel *recorded, client *artemis.Client, queue string, fail bool, opts ...artemis.ConsumerOption) <-chan handled {
	t.Helper()
	seen := make(chan handled, 16)
	h := func(hctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		select {
		case seen <- handled{span: trace.SpanContextFromContext(hctx), env: env}:
		default:
		}
		if fail {
			return errors.New("payment gateway timeout")
		}
		return nil
	}
	cons, err := artemis.NewConsumer(tel.Handlers(artemis.Handlers{urnCreated: h}),
		append([]artemis.ConsumerOption{artemis.WithObserver(tel),
			artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- client.Consume(cctx, queue, cons) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Consume: %v", err)
		}
	})
	return seen
}

func dial(t *testing.T, ctx context.Context, tel *recorded) *artemis.Client {
	t.Helper()
	client, err := artemis.Dial(ctx, []string{brokerURL(t)}, nil)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })
	return client
}

func receive(t *testing.T, ctx context.Context, seen <-chan handled) handled {
	t.Helper()
	select {
	case h := <-seen:
		return h
	case <-ctx.Done():
		t.Fatal("no delivery reached the handler")
	}
	return handled{}
}

// waitFor polls the metrics until cond holds or ctx ends: the Observer
// hears a settlement after the handler returned.
func waitFor(t *testing.T, ctx context.Context, tel *recorded, what string, cond func(map[string][]point) bool) map[string][]point {
	t.Helper()
	for {
		got := tel.collect(t)
		if cond(got) {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s: %v", what, got)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestIntegrationTraceThroughTheBroker(t *testing.T) {
	url := brokerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tel := newRecorded(t, Config{ServerURL: url})
	client := dial(t, ctx, tel)
	queue := freshQueue("bqtest.otel")
	cp, err := client.Publisher(ctx, queue, artemis.WithObserver(tel))
	if err != nil {
		t.Fatal(err)
	}
	seen := consuming(t, ctx, tel, client, queue, false)

	pctx, root := tel.tracer.Start(ctx, "checkout")
	id, err := tel.Publisher(cp, queue).Publish(pctx, artemis.Job(urnCreated, map[string]int{"order_id": 1042}))
	root.End()
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	h := receive(t, ctx, seen)
	send := tel.one(t, trace.SpanKindProducer)
	waitFor(t, ctx, tel, "the settlement", func(m map[string][]point) bool {
		return find(m, "babelqueue.settlements", map[string]string{"babelqueue.disposition": "accepted"}) == 1
	})
	process := tel.one(t, trace.SpanKindConsumer)
	sc := send.SpanContext()
	t.Logf("otel: send span %s, process span %s (parent %s), trace %s, trace_id %s",
		sc.SpanID(), process.SpanContext().SpanID(), process.Parent().SpanID(), sc.TraceID(), h.env.TraceID)
	if process.Parent().SpanID() != sc.SpanID() || !process.Parent().IsRemote() || process.SpanContext().TraceID() != sc.TraceID() {
		t.Errorf("process span parent %s in trace %s, want the send span %s in %s", process.Parent().SpanID(),
			process.SpanContext().TraceID(), sc.SpanID(), sc.TraceID())
	}
	if links := process.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != sc.SpanID() {
		t.Errorf("links %+v, want the send span", links)
	}
	if h.env.Meta.ID != id || h.env.TraceID != UUIDOf(sc.TraceID()) || h.span.SpanID() != process.SpanContext().SpanID() {
		t.Errorf("the handler saw meta.id %s trace_id %s span %s; want %s, %s, %s", h.env.Meta.ID, h.env.TraceID,
			h.span.SpanID(), id, UUIDOf(sc.TraceID()), process.SpanContext().SpanID())
	}
	if a := attrs(process); a["messaging.destination.name"] != queue || a["server.address"] != "127.0.0.1" {
		t.Errorf("process attributes %v", a)
	}
	if n := find(tel.collect(t), "messaging.client.sent.messages", map[string]string{"messaging.destination.name": queue, "error.type": ""}); n != 1 {
		t.Errorf("sent messages %d, want 1 (the Client's Observer)", n)
	}
}

func TestIntegrationRetriesAndDeadLettersAreCounted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tel := newRecorded(t, Config{})
	client := dial(t, ctx, tel)
	queue := freshQueue("bqtest.otel")
	cp, err := client.Publisher(ctx, queue, artemis.WithObserver(tel))
	if err != nil {
		t.Fatal(err)
	}
	// A short schedule: the failed first attempt waits 200 ms on the broker
	// as a scheduled copy (disposition "scheduled"), then dead-letters.
	consuming(t, ctx, tel, client, queue, true, artemis.WithMaxTries(2),
		artemis.WithRetrySchedule(func(int) time.Duration { return 200 * time.Millisecond }))
	if _, err := tel.Publisher(cp, queue).Publish(ctx, artemis.Job(urnCreated, nil)); err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, ctx, tel, "the dead letter", func(m map[string][]point) bool {
		return find(m, "babelqueue.dead_letters", nil) == 1
	})
	q := map[string]string{"messaging.destination.name": queue}
	for name, want := range map[string]int64{"babelqueue.retries": 1, "messaging.client.consumed.messages": 2} {
		if n := find(got, name, q); n != want {
			t.Errorf("%s = %d, want %d", name, n, want)
		}
	}
	if n := find(got, "babelqueue.settlements", with(q, "babelqueue.disposition", "scheduled")); n != 1 {
		t.Errorf("scheduled settlements %d, want 1", n)
	}
	if n := find(got, "babelqueue.dead_letters", with(q, "error.type", "handler_failed")); n != 1 {
		t.Errorf("dead letters of failed handlers %d, want 1", n)
	}
	// Both attempts are spans of the message's one trace.
	spans := tel.ended(trace.SpanKindConsumer)
	if len(spans) != 2 || spans[0].SpanContext().TraceID() != spans[1].SpanContext().TraceID() {
		t.Fatalf("%d process spans, want 2 in one trace", len(spans))
	}
	t.Logf("otel: %d process spans in trace %s, retries 1, dead letters 1", len(spans), spans[0].SpanContext().TraceID())
}

// pythonPublish publishes one message with the Python SDK (peer.py) and
// returns its meta.id and how its headers went.
func pythonPublish(t *testing.T, ctx context.Context, url, queue, traceID string, headers map[string]string) (string, string) {
	t.Helper()
	py := os.Getenv("BQ_PYTHON")
	if py == "" {
		t.Skip("BQ_PYTHON not set: the Python producer tests need the SDK's venv (BQ_PYTHON=$(scripts/python-peer setup))")
	}
	peer, err := filepath.Abs(filepath.Join("..", "testdata", "interop", "peer.py"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{peer, "--url", url, "publish", "--queue", queue, "--urn", urnCreated, "--data", `{"order_id":7}`, "--trace", traceID}
	for k, v := range headers {
		args = append(args, "--header", k+"="+v)
	}
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("peer.py publish: %v\n%s", err, out)
	}
	var id, via string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var line struct {
			Event, ID, Message string
			HeadersVia         string `json:"headers_via"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("peer.py printed %q: %v", sc.Text(), err)
		}
		switch line.Event {
		case "published":
			id, via = line.ID, line.HeadersVia
		case "error":
			t.Fatalf("peer.py: %s", line.Message)
		}
	}
	if id == "" {
		t.Fatalf("peer.py published nothing:\n%s", out)
	}
	return id, via
}

func TestIntegrationPythonProducerTraceparent(t *testing.T) {
	url := brokerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tel := newRecorded(t, Config{})
	client := dial(t, ctx, tel)

	const (
		traceID     = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"
		otelTrace   = "4bf92f3577b34da6a3ce929d0e0e4736"
		otelSpan    = "00f067aa0ba902b7"
		traceparent = "00-" + otelTrace + "-" + otelSpan + "-01"
	)
	for _, tc := range []struct {
		name                  string
		headers               map[string]string
		wantTrace, wantParent string
		wantLink              bool
	}{
		// An OpenTelemetry-instrumented Python producer: the consumer span
		// joins its trace, as the child of its span.
		{"traceparent", map[string]string{"traceparent": traceparent}, otelTrace, otelSpan, true},
		// The SDK's plain publish: the trace_id gives the trace.
		{"trace_id only", nil, "7b3f9c2ae41d4f889b2a1c0d5e6f7a8b", "980c512d6f4a8fba", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queue := freshQueue("bqtest.otel.py")
			seen := consuming(t, ctx, tel, client, queue, false)
			id, via := pythonPublish(t, ctx, url, queue, traceID, tc.headers)
			h := receive(t, ctx, seen)
			if h.env.Meta.ID != id || h.env.TraceID != traceID {
				t.Fatalf("handled meta.id %s trace_id %s, want %s %s", h.env.Meta.ID, h.env.TraceID, id, traceID)
			}
			if h.span.TraceID().String() != tc.wantTrace {
				t.Errorf("the consumer span is in trace %s, want %s", h.span.TraceID(), tc.wantTrace)
			}
			// The span ends once the handler returned.
			var process sdktrace.ReadOnlySpan
			waitFor(t, ctx, tel, "the process span", func(map[string][]point) bool {
				for _, s := range tel.ended(trace.SpanKindConsumer) {
					if s.SpanContext().SpanID() == h.span.SpanID() {
						process = s
						return true
					}
				}
				return false
			})
			if process.Parent().SpanID().String() != tc.wantParent || !process.Parent().IsRemote() {
				t.Errorf("parent %s, want %s (remote)", process.Parent().SpanID(), tc.wantParent)
			}
			links := process.Links()
			if linked := len(links) == 1 && links[0].SpanContext.SpanID().String() == otelSpan; linked != tc.wantLink {
				t.Errorf("links %+v, want a link to the producer's span: %v", links, tc.wantLink)
			}
			t.Logf("otel: python producer (%s, headers via %s): consumer span %s in trace %s",
				tc.name, via, h.span.SpanID(), h.span.TraceID())
		})
	}
}
