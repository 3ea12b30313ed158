// The metrics: the instruments, and the Observer methods that record a
// publish and a settlement on them.

package otel

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// DispositionKey is the attribute of a settlement's disposition
// (artemis.Disposition.String(): accepted, abandoned, released,
// dead_lettered, dropped, pending, and any the library adds).
const DispositionKey = attribute.Key("babelqueue.disposition")

type instruments struct {
	sent        metric.Int64Counter     // messaging.client.sent.messages
	sendTime    metric.Float64Histogram // messaging.client.operation.duration
	consumed    metric.Int64Counter     // messaging.client.consumed.messages
	processTime metric.Float64Histogram // messaging.process.duration
	settled     metric.Int64Counter     // babelqueue.settlements
	settleTime  metric.Float64Histogram // babelqueue.settlement.duration
	retries     metric.Int64Counter     // babelqueue.retries
	deadLetters metric.Int64Counter     // babelqueue.dead_letters
}

func newInstruments(m metric.Meter) (instruments, error) {
	var (
		in   instruments
		errs [8]error
	)
	var sent messagingconv.ClientSentMessages
	sent, errs[0] = messagingconv.NewClientSentMessages(m)
	in.sent = sent.Inst()
	var op messagingconv.ClientOperationDuration
	op, errs[1] = messagingconv.NewClientOperationDuration(m)
	in.sendTime = op.Inst()
	var consumed messagingconv.ClientConsumedMessages
	consumed, errs[2] = messagingconv.NewClientConsumedMessages(m)
	in.consumed = consumed.Inst()
	var process messagingconv.ProcessDuration
	process, errs[3] = messagingconv.NewProcessDuration(m)
	in.processTime = process.Inst()
	in.settled, errs[4] = m.Int64Counter("babelqueue.settlements", metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries settled, by disposition and, when not simply handled, error.type (the delivery's kind)."))
	in.settleTime, errs[5] = m.Float64Histogram("babelqueue.settlement.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the handler's start (or the decision to settle) to the end of the settlement."))
	in.retries, errs[6] = m.Int64Counter("babelqueue.retries", metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries of a message an earlier attempt failed (attempts above 0), by disposition."))
	in.deadLetters, errs[7] = m.Int64Counter("babelqueue.dead_letters", metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries copied to the dead-letter queue, by error.type."))
	return in, errors.Join(errs[:]...)
}

// Published records one publish: messaging.client.sent.messages and
// messaging.client.operation.duration, with error.type the outcome
// (not_accepted, unknown, error) when the broker did not accept it. It
// implements artemis.Observer.
func (t *Telemetry) Published(ev artemis.PublishEvent) {
	set := t.sets.get(setKey{queue: ev.Queue, outcome: ev.Outcome}, t.publishSet)
	ctx := context.Background()
	t.inst.sent.Add(ctx, 1, set)
	t.inst.sendTime.Record(ctx, ev.Duration.Seconds(), set)
}

// Settled records one settlement: messaging.client.consumed.messages (not
// for a delivery given back unstarted), messaging.process.duration when
// the handler ran, babelqueue.settlements and babelqueue.settlement.duration,
// babelqueue.retries when attempts is above 0, and babelqueue.dead_letters.
// It implements artemis.Observer.
func (t *Telemetry) Settled(ev artemis.SettleEvent) {
	ctx := context.Background()
	base := setKey{queue: ev.Queue, settle: true}
	if ev.Kind != artemis.KindGivenBack {
		t.inst.consumed.Add(ctx, 1, t.sets.get(base, t.settleSet))
	}
	if ev.Handler > 0 {
		k := base
		k.process, k.failed = true, ev.Kind == artemis.KindHandlerFailed
		t.inst.processTime.Record(ctx, ev.Handler.Seconds(), t.sets.get(k, t.settleSet))
	}
	k := base
	k.disp, k.kind, k.outcomeSet = ev.Disposition, ev.Kind, true
	set := t.sets.get(k, t.settleSet)
	t.inst.settled.Add(ctx, 1, set)
	t.inst.settleTime.Record(ctx, ev.Latency.Seconds(), set)
	if ev.Attempts > 0 && ev.Kind != artemis.KindGivenBack {
		t.inst.retries.Add(ctx, 1, set)
	}
	if ev.Disposition == artemis.DispositionDeadLettered {
		t.inst.deadLetters.Add(ctx, 1, set)
	}
}

// setKey names one attribute set; a set is made once per key and kept.
type setKey struct {
	queue      string
	outcome    artemis.PublishOutcome // a publish's
	settle     bool                   // a settlement's set (else a publish's)
	process    bool                   // the process duration's
	failed     bool                   // the handler failed
	outcomeSet bool                   // with the disposition and kind
	disp       artemis.Disposition
	kind       artemis.DeliveryKind
}

// setCache keeps the attribute sets by key: the Observer is on every
// delivery's path, and making a set sorts and allocates. The keys are few
// (queues times dispositions times kinds).
type setCache struct{ m sync.Map } // setKey -> metric.MeasurementOption

func (c *setCache) get(k setKey, build func(setKey) attribute.Set) metric.MeasurementOption {
	if v, ok := c.m.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := c.m.LoadOrStore(k, metric.WithAttributeSet(build(k)))
	return v.(metric.MeasurementOption)
}

func (t *Telemetry) publishSet(k setKey) attribute.Set {
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemActiveMQ,
		semconv.MessagingOperationName("send"),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingDestinationName(k.queue),
	}
	if k.outcome != artemis.PublishAccepted {
		attrs = append(attrs, semconv.ErrorTypeKey.String(k.outcome.String()))
	}
	return attribute.NewSet(append(attrs, t.server...)...)
}

func (t *Telemetry) settleSet(k setKey) attribute.Set {
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemActiveMQ,
		semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingDestinationName(k.queue),
	}
	if k.failed {
		attrs = append(attrs, semconv.ErrorTypeKey.String(artemis.KindHandlerFailed.String()))
	}
	if k.outcomeSet {
		attrs = append(attrs, DispositionKey.String(k.disp.String()))
		if k.kind != artemis.KindNone {
			attrs = append(attrs, semconv.ErrorTypeKey.String(k.kind.String()))
		}
	}
	return attribute.NewSet(append(attrs, t.server...)...)
}
