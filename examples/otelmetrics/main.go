// Command otelmetrics counts and times every publish and every settlement
// with OpenTelemetry metrics: the otel module's Telemetry is the Observer
// of the publisher and the consumer, on any MeterProvider.
//
//	cd examples && go run ./otelmetrics [-queue name]
//
// It publishes five orders and consumes them; the handler of order 1003
// fails every time, so that order is retried twice and then dead-lettered.
// The instruments (the module's documentation has them all):
// messaging.client.sent.messages and messaging.client.operation.duration
// per publish; messaging.client.consumed.messages, messaging.process.duration
// (the handler), babelqueue.settlements and babelqueue.settlement.duration
// by babelqueue.disposition and error.type, babelqueue.retries and
// babelqueue.dead_letters per delivery. At the end the example collects
// them through a ManualReader and prints them; a real program gives the
// MeterProvider a periodic OTLP exporter instead.
//
// The broker is ARTEMIS_URL (default amqp://babel:babel@127.0.0.1:5672);
// without -queue a fresh queue name is used.
package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/workload"
	bqotel "github.com/babelqueue/babelqueue-go-artemis/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

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

func run(ctx context.Context, cfg config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	manual, reader := sdkmetric.NewManualReader(), cfg.Reader
	if reader == nil {
		reader = manual
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if cfg.Reader == nil {
		defer mp.Shutdown(context.WithoutCancel(ctx))
	}
	tel, err := bqotel.New(bqotel.Config{MeterProvider: mp})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "otelmetrics example: queue %s, broker %s\n", cfg.Queue, broker.Redact(cfg.URL))
	if err := workload.Run(ctx, cfg.URL, cfg.Queue, tel, out); err != nil {
		return err
	}
	if cfg.Reader != nil {
		return nil
	}
	var rm metricdata.ResourceMetrics
	if err := manual.Collect(ctx, &rm); err != nil {
		return err
	}
	fmt.Fprintln(out, strings.Join(Lines(rm), "\n"))
	return nil
}

// Lines renders the collected metrics, one data point a line, sorted,
// without the attributes every point has.
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

func labels(set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() {
		switch a.Key {
		case "messaging.system", "messaging.destination.name", "messaging.operation.type":
			continue
		}
		kv = append(kv, string(a.Key)+"="+a.Value.Emit())
	}
	return strings.Join(kv, ",")
}
