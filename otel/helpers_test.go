package otel

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// recorded is a Telemetry on the SDK's in-memory span recorder and a
// manual metric reader.
type recorded struct {
	*Telemetry
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
}

func newRecorded(t testing.TB, cfg Config) *recorded {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	cfg.TracerProvider, cfg.MeterProvider = tp, mp
	tel, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &recorded{Telemetry: tel, spans: rec, tp: tp, reader: reader}
}

// ended returns the ended spans of kind.
func (r *recorded) ended(kind trace.SpanKind) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.SpanKind() == kind {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only ended span of kind, failing the test otherwise.
func (r *recorded) one(t testing.TB, kind trace.SpanKind) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := r.ended(kind)
	if len(spans) != 1 {
		t.Fatalf("%d ended spans of kind %v, want 1", len(spans), kind)
	}
	return spans[0]
}

// attrs renders a span's attributes as strings.
func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, a := range s.Attributes() {
		m[string(a.Key)] = a.Value.String()
	}
	return m
}

// point is one collected data point: an int64 sum's value, or a
// histogram's count.
type point struct {
	attrs map[string]string
	value int64
	sum   float64
}

// collect reads the metrics: each instrument's points.
func (r *recorded) collect(t testing.TB) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, ScopeName)
		}
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: setMap(dp.Attributes), value: dp.Value})
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: setMap(dp.Attributes), value: int64(dp.Count), sum: dp.Sum})
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func setMap(s attribute.Set) map[string]string {
	m := map[string]string{}
	for _, kv := range s.ToSlice() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// find returns the value of the point of name whose attributes include
// want (0 when there is none).
func find(points map[string][]point, name string, want map[string]string) int64 {
	var n int64
	for _, p := range points[name] {
		if includes(p.attrs, want) {
			n += p.value
		}
	}
	return n
}

func includes(have, want map[string]string) bool {
	for k, v := range want {
		if v == "" {
			if _, ok := have[k]; ok {
				return false
			}
			continue
		}
		if have[k] != v {
			return false
		}
	}
	return true
}
