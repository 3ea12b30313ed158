package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/exampletest"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/workload"
	bqotel "github.com/babelqueue/babelqueue-go-artemis/otel"
)

func TestMetricsThroughTheBroker(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	ex := exampletest.New(t, "ex-otelmetrics")
	queue := ex.Queue
	ex.Purge(queue + ".dlq")

	out := ex.Run(func(ctx context.Context, w io.Writer) error {
		return run(ctx, config{Config: ex.Config(time.Minute), Reader: reader}, w)
	})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	t.Logf("metrics:\n%s", strings.Join(Lines(rm), "\n"))

	byName := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != bqotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, bqotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			byName[m.Name] = m
		}
	}

	// Publishes: five, all accepted, each timed.
	sent := sums(t, byName["messaging.client.sent.messages"])
	if len(sent) != 1 || sent[key(queue, "messaging.operation.name", "send", "messaging.operation.type", "send")] != workload.Orders {
		t.Errorf("messaging.client.sent.messages %v, want %d accepted sends to %s", sent, workload.Orders, queue)
	}
	sendTime := histograms(t, byName["messaging.client.operation.duration"])
	if h := sendTime[key(queue, "messaging.operation.name", "send", "messaging.operation.type", "send")]; h.Count != workload.Orders || h.Sum <= 0 {
		t.Errorf("messaging.client.operation.duration count %d sum %v, want %d publishes with a positive time", h.Count, h.Sum, workload.Orders)
	}

	// Settlements: four orders accepted, the failing one scheduled for a retry twice
	// then dead-lettered.
	settled := sums(t, byName["babelqueue.settlements"])
	want := map[string]int64{
		proc(queue, "babelqueue.disposition", "accepted"):                                      workload.Orders - 1,
		proc(queue, "babelqueue.disposition", "scheduled", "error.type", "handler_failed"):     workload.MaxTries - 1,
		proc(queue, "babelqueue.disposition", "dead_lettered", "error.type", "handler_failed"): 1,
	}
	if !equal(settled, want) {
		t.Errorf("babelqueue.settlements\n got %v\nwant %v", settled, want)
	}
	settleTime := histograms(t, byName["babelqueue.settlement.duration"])
	var n uint64
	for _, h := range settleTime {
		n += h.Count
	}
	if n != workload.Settlements {
		t.Errorf("babelqueue.settlement.duration counts %d settlements, want %d", n, workload.Settlements)
	}

	// The handler ran once per delivery: 4 successes, 3 failures.
	process := histograms(t, byName["messaging.process.duration"])
	if ok, failed := process[proc(queue)].Count, process[proc(queue, "error.type", "handler_failed")].Count; ok != workload.Orders-1 || failed != workload.MaxTries {
		t.Errorf("messaging.process.duration: %d successful and %d failed handler runs, want %d and %d", ok, failed, workload.Orders-1, workload.MaxTries)
	}

	// The failing order: retried twice (attempts 1 and 2), dead-lettered
	// once; every delivery consumed.
	if got := sums(t, byName["babelqueue.retries"]); got[proc(queue, "babelqueue.disposition", "scheduled", "error.type", "handler_failed")] != workload.MaxTries-2 ||
		got[proc(queue, "babelqueue.disposition", "dead_lettered", "error.type", "handler_failed")] != 1 {
		t.Errorf("babelqueue.retries %v, want one scheduled retry and the dead-lettered one", got)
	}
	if got := sums(t, byName["babelqueue.dead_letters"]); len(got) != 1 || got[proc(queue, "babelqueue.disposition", "dead_lettered", "error.type", "handler_failed")] != 1 {
		t.Errorf("babelqueue.dead_letters %v, want the failing order", got)
	}
	if got := sums(t, byName["messaging.client.consumed.messages"]); got[proc(queue)] != workload.Settlements {
		t.Errorf("messaging.client.consumed.messages %v, want %d", got, workload.Settlements)
	}

	// The failing order's copy is on the DLQ.
	if dlq := ex.Browse(queue + ".dlq"); len(dlq) != 1 {
		t.Errorf("%d messages on %s.dlq, want the failing order's copy", len(dlq), queue)
	}
	if !strings.Contains(out, "7 settlements observed") {
		t.Errorf("the output lacks the settlement count:\n%s", out)
	}
}

// key renders a data point's attributes as labels does, plus the two
// every point carries, in attribute.Set order.
func key(queue string, kv ...string) string {
	attrs := []attribute.KeyValue{attribute.String("messaging.system", "activemq"), attribute.String("messaging.destination.name", queue)}
	for i := 0; i < len(kv); i += 2 {
		attrs = append(attrs, attribute.String(kv[i], kv[i+1]))
	}
	set := attribute.NewSet(attrs...)
	return set.Encoded(attribute.DefaultEncoder())
}

// proc is key for a consumer-side point (operation process).
func proc(queue string, kv ...string) string {
	return key(queue, append([]string{"messaging.operation.name", "process", "messaging.operation.type", "process"}, kv...)...)
}

func sums(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	data, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: %T, want an int64 sum", m.Name, m.Data)
	}
	if !data.IsMonotonic {
		t.Errorf("%s is not monotonic: want a counter", m.Name)
	}
	out := map[string]int64{}
	for _, dp := range data.DataPoints {
		out[dp.Attributes.Encoded(attribute.DefaultEncoder())] = dp.Value
	}
	return out
}

func histograms(t *testing.T, m metricdata.Metrics) map[string]metricdata.HistogramDataPoint[float64] {
	t.Helper()
	data, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s: %T, want a float64 histogram", m.Name, m.Data)
	}
	out := map[string]metricdata.HistogramDataPoint[float64]{}
	for _, dp := range data.DataPoints {
		out[dp.Attributes.Encoded(attribute.DefaultEncoder())] = dp
	}
	return out
}

func equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
