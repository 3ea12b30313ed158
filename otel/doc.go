// Package otel instruments the BabelQueue Artemis library with
// OpenTelemetry: traces for publishing and handling, metrics for every
// publish and settlement. It is a Go module of its own, so the library's
// go.mod never pulls OpenTelemetry in; import it as
//
//	bqotel "github.com/babelqueue/babelqueue-go-artemis/otel"
//
// One Telemetry serves a whole program, one line at each place:
//
//	tel, err := bqotel.New(bqotel.Config{TracerProvider: tp, MeterProvider: mp})
//	cp, err := client.Publisher(ctx, "orders", artemis.WithObserver(tel))              // publish metrics
//	pub := tel.Publisher(cp, "orders")                                                  // send spans, traceparent
//	cons, err := artemis.NewConsumer(tel.Handlers(handlers), artemis.WithObserver(tel)) // process spans, settlement metrics
//
// # Traces
//
// The spans follow OpenTelemetry's messaging semantic conventions of
// semconv v1.43.0 (go.opentelemetry.io/otel/semconv/v1.43.0). A publish
// through Publisher is a span "send <queue>" of kind producer; its context
// is injected, as W3C traceparent and tracestate (and baggage), into the
// message's out-of-band headers (application properties, see
// artemis.WithHeaders). A handler wrapped by Handler or Handlers runs in a
// span "process <queue>" of kind consumer whose parent is the context
// extracted from the message (the message's creation context) and which
// also links to it, as the conventions ask of a process span. Attributes:
// messaging.system "activemq" (semconv registers no value for Artemis; it
// is Apache ActiveMQ's broker, and "activemq" is the registered value for
// Apache ActiveMQ), messaging.operation.name and .type, messaging.destination.name
// (the queue), messaging.message.id (meta.id),
// messaging.message.conversation_id (the envelope's trace_id),
// messaging.message.body.size on the consumer, babelqueue.urn,
// babelqueue.attempts on the consumer, and server.address and server.port
// when Config.ServerURL is set. A failed publish or handler sets the span's
// status to error, records the error and sets error.type.
//
// The envelope's trace_id and the OpenTelemetry trace are one, as in the
// family's other SDKs: a publish that builds its envelope without
// artemis.EnvelopeTraceID gets the producer span's trace id as its
// trace_id (in UUID form, UUIDOf), and a message that arrives with no valid
// traceparent (from a producer without OpenTelemetry, such as the Java or
// Python SDK's plain publish) is handled under a remote parent derived from
// its trace_id (TraceIDOf: a UUID's 16 bytes are the trace id, any other
// string the first 16 bytes of its SHA-256; the parent span id is the first
// 8 bytes of the SHA-256 of "babelqueue-span:" and the trace_id), so every
// hop of one conversation lands in one trace whatever the producer.
//
// # Metrics
//
// A Telemetry is an artemis.Observer. On its MeterProvider it records
// messaging.client.sent.messages and messaging.client.operation.duration
// (send) for every publish, messaging.client.consumed.messages and
// messaging.process.duration (the handler's time) for every delivery, and
// babelqueue.settlements and babelqueue.settlement.duration by
// babelqueue.disposition and error.type (the delivery's kind),
// babelqueue.retries (deliveries whose attempts are above 0) and
// babelqueue.dead_letters (by error.type). A disposition or kind is carried
// as its String(), so a value the library adds later becomes a new
// attribute value without a change here.
package otel
