// Command otelmetrics counts and times every publish and every settlement
// with OpenTelemetry metrics, through the library's Observer hook: no
// handler is wrapped, and the library itself does not import OpenTelemetry.
//
//	cd examples && go run ./otelmetrics [-queue name]
//
// It publishes five orders and consumes them; the handler of order 1003
// fails every time, so that order is retried twice and then dead-lettered.
// The Observer records:
//
//   - messaging.client.sent.messages (counter) and
//     messaging.client.operation.duration (histogram, s) for every publish,
//     with error.type set to the outcome when it was not accepted;
//   - messaging.process.duration (histogram, s): the handler's time;
//   - babelqueue.settlements (counter) and babelqueue.settlement.duration
//     (histogram, s) for every settlement, by babelqueue.disposition and
//     error.type (SettleEvent.Kind.String(): handler_failed, poison, ...).
//
// Every instrument carries messaging.system "activemq" and
// messaging.destination.name (the queue), as OpenTelemetry's messaging
// semantic conventions (semconv v1.43.0) name them. At the end the example
// collects the metrics through a ManualReader and prints them; a real
// program would give the MeterProvider a periodic OTLP exporter instead.
//
// The broker is ARTEMIS_URL (default amqp://babel:babel@127.0.0.1:5672);
// without -queue a fresh queue name is used.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/workload"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// ScopeName names the instrumentation scope of the example's instruments.
const ScopeName = "github.com/babelqueue/babelqueue-go-artemis/examples/otelmetrics"

type config struct {
	broker.Config
	// Reader collects the metrics and belongs to the caller; nil means a
	// ManualReader whose metrics are printed at the end.
	Reader sdkmetric.Reader
}

func main() {
	var cfg config
	broker.Main("otelmetrics", &cfg.Config, broker.Flags{Timeout: time.Minute},
		func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
}

// Metrics is an artemis.Observer that records OpenTelemetry metrics. The
// instruments are safe for concurrent use and do not block, as an
// Observer must be.
type Metrics struct {
	sent        metric.Int64Counter
	sendTime    metric.Float64Histogram
	processTime metric.Float64Histogram
	settled     metric.Int64Counter
	settleTime  metric.Float64Histogram
}

// NewMetrics makes the instruments on mp's meter.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	m := mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	var errs [5]error
	var ms Metrics
	ms.sent, errs[0] = m.Int64Counter("messaging.client.sent.messages",
		metric.WithUnit("{message}"), metric.WithDescription("Messages published, by outcome."))
	ms.sendTime, errs[1] = m.Float64Histogram("messaging.client.operation.duration",
		metric.WithUnit("s"), metric.WithDescription("Time from the projection of a message to the broker's outcome."))
	ms.processTime, errs[2] = m.Float64Histogram("messaging.process.duration",
		metric.WithUnit("s"), metric.WithDescription("Time the handler took."))
	ms.settled, errs[3] = m.Int64Counter("babelqueue.settlements",
		metric.WithUnit("{message}"), metric.WithDescription("Deliveries settled, by disposition and error kind."))
	ms.settleTime, errs[4] = m.Float64Histogram("babelqueue.settlement.duration",
		metric.WithUnit("s"), metric.WithDescription("Time from the handler's start to the settlement's end."))
	return &ms, errors.Join(errs[:]...)
}

// Published implements artemis.Observer.
func (m *Metrics) Published(ev artemis.PublishEvent) {
	attrs := []attribute.KeyValue{semconv.MessagingSystemActiveMQ, semconv.MessagingDestinationName(ev.Queue),
		semconv.MessagingOperationName("send")}
	if ev.Outcome != artemis.PublishAccepted {
		attrs = append(attrs, semconv.ErrorTypeKey.String(ev.Outcome.String()))
	}
	set := metric.WithAttributes(attrs...)
	ctx := context.Background()
	m.sent.Add(ctx, 1, set)
	m.sendTime.Record(ctx, ev.Duration.Seconds(), set)
}

// Settled implements artemis.Observer.
func (m *Metrics) Settled(ev artemis.SettleEvent) {
	ctx := context.Background()
	system, dest := semconv.MessagingSystemActiveMQ, semconv.MessagingDestinationName(ev.Queue)
	if ev.Handler > 0 {
		attrs := []attribute.KeyValue{system, dest, semconv.MessagingOperationName("process")}
		if ev.Kind == artemis.KindHandlerFailed {
			attrs = append(attrs, semconv.ErrorTypeKey.String(ev.Kind.String()))
		}
		m.processTime.Record(ctx, ev.Handler.Seconds(), metric.WithAttributes(attrs...))
	}
	attrs := []attribute.KeyValue{system, dest, attribute.String("babelqueue.disposition", ev.Disposition.String())}
	if ev.Kind != artemis.KindNone {
		attrs = append(attrs, semconv.ErrorTypeKey.String(ev.Kind.String()))
	}
	set := metric.WithAttributes(attrs...)
	m.settled.Add(ctx, 1, set)
	m.settleTime.Record(ctx, ev.Latency.Seconds(), set)
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	reader := cfg.Reader
	var manual *sdkmetric.ManualReader
	if reader == nil {
		manual = sdkmetric.NewManualReader()
		reader = manual
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if manual != nil {
		defer mp.Shutdown(context.WithoutCancel(ctx))
	}
	metrics, err := NewMetrics(mp)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "otelmetrics example: queue %s, broker %s\n", cfg.Queue, broker.Redact(cfg.URL))
	// The hooks: metrics is the Observer of the publisher and the consumer.
	if err := workload.Run(ctx, cfg.URL, cfg.Queue, metrics, out); err != nil {
		return err
	}
	if manual == nil {
		return nil
	}
	var rm metricdata.ResourceMetrics
	if err := manual.Collect(ctx, &rm); err != nil {
		return err
	}
	for _, line := range Lines(rm) {
		fmt.Fprintln(out, line)
	}
	return nil
}

// Lines renders the collected metrics, one data point a line, sorted.
func Lines(rm metricdata.ResourceMetrics) []string {
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, labels(dp.Attributes), dp.Value))
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d sum=%.6fs", m.Name, labels(dp.Attributes), dp.Count, dp.Sum))
				}
			}
		}
	}
	sort.Strings(lines)
	return lines
}

// labels renders an attribute set without the attributes every point has.
func labels(set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() {
		switch a.Key {
		case semconv.MessagingSystemKey, semconv.MessagingDestinationNameKey:
			continue
		}
		kv = append(kv, string(a.Key)+"="+a.Value.Emit())
	}
	return strings.Join(kv, ",")
}
