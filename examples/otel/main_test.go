package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/exampletest"
)

func TestTraceThroughTheBroker(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ex := exampletest.New(t, "ex-otel")
	queue := ex.Queue

	out := ex.Run(func(ctx context.Context, w io.Writer) error {
		return run(ctx, config{Config: ex.Config(time.Minute), TracerProvider: tp}, w)
	})

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans ended, want 2", len(spans))
	}
	var send, process sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch s.SpanKind() {
		case trace.SpanKindProducer:
			send = s
		case trace.SpanKindConsumer:
			process = s
		}
	}
	if send == nil || process == nil {
		t.Fatalf("want one producer and one consumer span, got kinds %v and %v", spans[0].SpanKind(), spans[1].SpanKind())
	}
	if send.Name() != "send "+queue || process.Name() != "process "+queue {
		t.Errorf("span names %q and %q, want %q and %q", send.Name(), process.Name(), "send "+queue, "process "+queue)
	}

	// The consumer span's parent is the producer span, and it came out of
	// the message (a remote parent), across the broker.
	sc := send.SpanContext()
	if process.Parent().SpanID() != sc.SpanID() {
		t.Errorf("process span's parent %s, want the send span %s", process.Parent().SpanID(), sc.SpanID())
	}
	if !process.Parent().IsRemote() {
		t.Error("the process span's parent is not remote: it did not come from the message")
	}
	if process.SpanContext().TraceID() != sc.TraceID() || !sc.TraceID().IsValid() {
		t.Errorf("trace ids %s and %s, want one valid trace", sc.TraceID(), process.SpanContext().TraceID())
	}
	if send.Parent().IsValid() {
		t.Errorf("the send span has a parent %s, want a root span", send.Parent().SpanID())
	}
	if links := process.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != sc.SpanID() {
		t.Errorf("process span links %+v, want one link to the send span", links)
	}
	if want := "the handler got traceparent 00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; !strings.Contains(out, want) {
		t.Errorf("the output lacks %q", want)
	}

	// The messaging semantic conventions.
	sendAttrs, processAttrs := attrs(send), attrs(process)
	for name, want := range map[string]map[string]string{
		"send": {
			"messaging.system": "activemq", "messaging.operation.name": "send", "messaging.operation.type": "send",
			"messaging.destination.name": queue,
		},
		"process": {
			"messaging.system": "activemq", "messaging.operation.name": "process", "messaging.operation.type": "process",
			"messaging.destination.name": queue,
		},
	} {
		got := sendAttrs
		if name == "process" {
			got = processAttrs
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s span: %s = %q, want %q", name, k, got[k], v)
			}
		}
		if got["server.address"] == "" || got["server.port"] == "" {
			t.Errorf("%s span: server.address %q server.port %q, want both", name, got["server.address"], got["server.port"])
		}
	}
	for _, k := range []string{"messaging.message.id", "messaging.message.conversation_id"} {
		if sendAttrs[k] != processAttrs[k] {
			t.Errorf("%s: send %q, process %q, want the same", k, sendAttrs[k], processAttrs[k])
		}
		if _, err := uuid.Parse(sendAttrs[k]); err != nil {
			t.Errorf("%s = %q, want a UUID (meta.id, trace_id)", k, sendAttrs[k])
		}
	}
	if sendAttrs["messaging.message.id"] == sendAttrs["messaging.message.conversation_id"] {
		t.Error("messaging.message.id equals messaging.message.conversation_id: want meta.id and trace_id")
	}
	if !strings.Contains(out, "(meta.id "+sendAttrs["messaging.message.id"]+")") {
		t.Errorf("messaging.message.id %s is not the published meta.id", sendAttrs["messaging.message.id"])
	}
}

func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, a := range s.Attributes() {
		if a.Value.Type() == attribute.INT64 || a.Value.Type() == attribute.STRING {
			m[string(a.Key)] = a.Value.Emit()
		}
	}
	return m
}
