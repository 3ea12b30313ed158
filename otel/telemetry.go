// Config, New and the Telemetry they build: the tracer, the propagator,
// the instruments and the attributes every span and data point carries.

package otel

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// ScopeName is the instrumentation scope of the spans and instruments.
const ScopeName = "github.com/babelqueue/babelqueue-go-artemis/otel"

// Config says where the telemetry goes. The zero Config uses
// OpenTelemetry's global providers and the W3C propagators.
type Config struct {
	// TracerProvider starts the spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the instruments. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator injects the span context into a message's headers and
	// extracts it from them. Default: W3C TraceContext and Baggage (not the
	// global propagator, which is a no-op until a program sets one).
	Propagator propagation.TextMapPropagator
	// ServerURL is the broker's URL (amqp://host:port, or amqps://), for
	// the server.address and server.port attributes; its user and password
	// are never read. Default: "", no server attributes.
	ServerURL string
}

// Telemetry traces publishes and handlers and records metrics of every
// publish and settlement. It is an artemis.Observer: give it to
// artemis.WithObserver, on a Consumer and on a publisher. It is safe for
// concurrent use.
type Telemetry struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	server []attribute.KeyValue // server.address, server.port
	inst   instruments
	sets   setCache
}

var _ artemis.Observer = (*Telemetry)(nil)

// New makes a Telemetry: its tracer and its instruments. It fails when
// ServerURL is not a URL or an instrument cannot be made.
func New(cfg Config) (*Telemetry, error) {
	tp, mp, prop := cfg.TracerProvider, cfg.MeterProvider, cfg.Propagator
	if tp == nil {
		tp = gotel.GetTracerProvider()
	}
	if mp == nil {
		mp = gotel.GetMeterProvider()
	}
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	server, err := serverAttributes(cfg.ServerURL)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{
		tracer: tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   prop,
		server: server,
	}
	if t.inst, err = newInstruments(mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))); err != nil {
		return nil, fmt.Errorf("babelqueue otel: %w", err)
	}
	return t, nil
}

// serverAttributes are server.address and server.port of a broker URL;
// the port defaults to AMQP's (5672, 5671 for amqps).
func serverAttributes(raw string) ([]attribute.KeyValue, error) {
	if raw == "" {
		return nil, nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		// url's error would quote the URL, password and all.
		return nil, errors.New("babelqueue otel: Config.ServerURL is not a broker URL (amqp://host:port)")
	}
	port := u.Port()
	if port == "" {
		port = "5672"
		if u.Scheme == "amqps" {
			port = "5671"
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return nil, errors.New("babelqueue otel: Config.ServerURL has no valid port")
	}
	return []attribute.KeyValue{semconv.ServerAddress(u.Hostname()), semconv.ServerPort(n)}, nil
}
