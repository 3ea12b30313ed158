// Consumer.Handle: one delivery through the consume stages, top to bottom:
// the gate, routing, decoding (or poison), reconciliation, the payload check,
// the handler; each stage settles the delivery it stops. Also the release of
// a delivery no stage saw (a consumer that cannot handle, a shutdown).

package artemis

import (
	"context"
	"errors"
	"log/slog"

	"github.com/Azure/go-amqp"
)

// Handle runs one delivery through the gate, routing, decoding and the
// handler, and settles it exactly once. It returns the error it reported
// (nil when the message was accepted by its handler or settled silently by
// the unknown-URN strategy); a failed settlement is returned too, matching
// ErrSettlement. The handler runs with ctx; settlement does not stop when
// ctx ends.
func (c *Consumer) Handle(ctx context.Context, r Receiver, msg *amqp.Message) error {
	if c.err != nil {
		err := c.err
		rerr := r.ReleaseMessage(context.WithoutCancel(ctx), msg)
		if rerr != nil {
			err = errors.Join(err, &DeliveryError{Kind: KindSettlement, Err: rerr})
		}
		c.observeRelease(r, msg, KindInvalidConfig, rerr)
		return err
	}
	return c.handle(ctx, ctx.Done(), r, msg, nil)
}

// handle runs one delivery to its disposition. lost, when not nil, hears
// of every settlement that failed (Listen stops on a lost link).
func (c *Consumer) handle(ctx context.Context, stop <-chan struct{}, r Receiver, msg *amqp.Message, lost func(error)) error {
	d := delivery{c: c, r: r, msg: msg, ctx: ctx, stop: stop, lost: lost,
		urn: routingURN(msg), attempts: reconcileAttempts(0, deliveryCount(msg))}
	if err := gateVersion(msg); err != nil {
		return d.gated(err)
	}
	if d.urn != "" && c.handlers[d.urn] == nil && c.unknown != UnknownURNDeadLetter {
		// Routed by the annotation alone: the body is never decoded.
		return d.unknownURN()
	}
	env, body, err := decodeBody(msg)
	if err != nil {
		return d.poison(body, err)
	}
	d.env = env
	if d.urn == "" {
		d.urn = env.URN
	}
	env.Attempts = reconcileAttempts(env.Attempts, deliveryCount(msg))
	if c.memory != nil && c.memory.n.Load() > 0 {
		env.Attempts = c.memory.reconcile(d.queue(), env.Meta.ID, env.Attempts)
	}
	d.attempts = env.Attempts
	h := c.handlers[d.urn]
	if h == nil {
		return d.unknownURN()
	}
	if c.payload != nil {
		if settled, err := d.checkPayload(); settled {
			return err
		}
	}
	return d.call(withMessage(ctx, msg), h)
}

// DecodeMessage returns the envelope a Consumer hands to a handler for msg,
// by the very rules Handle applies before routing: the bq_schema_version
// gate, then the body read (an AMQP value holding a string or binary, or
// data sections), decoded as one envelope and validated. When a Consumer
// would not accept msg, the error is a *DeliveryError of KindVersionGated
// or KindPoison (matching ErrVersionGated or ErrPoison) whose Err says
// why; its Disposition is DispositionPending, as nothing was settled.
// The envelope's Attempts is reconciled with the delivery count, as the
// handler sees it.
// Routing (the handlers, the unknown-URN strategy) and a payload check are
// the Consumer's own and not applied here.
func DecodeMessage(msg *amqp.Message) (*Envelope, error) {
	if msg == nil {
		return nil, &DeliveryError{Kind: KindPoison, Err: errNoBody}
	}
	if err := gateVersion(msg); err != nil {
		return nil, &DeliveryError{Kind: KindVersionGated, URN: routingURN(msg), Err: err,
			Attempts: reconcileAttempts(0, deliveryCount(msg))}
	}
	env, _, err := decodeBody(msg)
	if err != nil {
		return nil, &DeliveryError{Kind: KindPoison, URN: routingURN(msg), Err: err,
			Attempts: reconcileAttempts(0, deliveryCount(msg))}
	}
	env.Attempts = reconcileAttempts(env.Attempts, deliveryCount(msg))
	return env, nil
}

// decodeBody reads msg's body and decodes it as one valid envelope. On
// failure it returns the cause and the body as the poison record keeps it.
func decodeBody(msg *amqp.Message) (*Envelope, string, error) {
	body, _, err := readBody(msg)
	if err != nil {
		return nil, unreadableBody(msg), err
	}
	env, err := decodeString(body)
	if err == nil {
		err = env.Validate()
	}
	if err != nil {
		return nil, body, err
	}
	return env, body, nil
}

// observeRelease reports a delivery released without being handled, for
// kind (KindGivenBack, or KindInvalidConfig for a consumer that cannot
// handle anything), to the observer, if any: DispositionPending and
// KindSettlement when the release failed (serr).
func (c *Consumer) observeRelease(r Receiver, msg *amqp.Message, kind DeliveryKind, serr error) {
	if c.observer == nil {
		return
	}
	ev := SettleEvent{Queue: c.queueName(r), URN: routingURN(msg), Disposition: DispositionReleased, Kind: kind,
		Attempts: reconcileAttempts(0, deliveryCount(msg))}
	if kind == KindInvalidConfig {
		ev.Err = c.err // the configuration error: what an operator must fix
	}
	if serr != nil {
		ev.Disposition, ev.Kind, ev.Err = DispositionPending, KindSettlement, serr
	}
	c.observeSettled(ev)
}

// giveBack releases a delivery that was taken but never started. The
// observer hears of it either way, as KindGivenBack or KindSettlement.
func (c *Consumer) giveBack(ctx context.Context, r Receiver, msg *amqp.Message) {
	if msg == nil {
		return
	}
	err := r.ReleaseMessage(ctx, msg)
	if err != nil {
		e := &DeliveryError{Kind: KindSettlement, URN: routingURN(msg), Disposition: DispositionPending, Err: err}
		c.report(ctx, e, nil, msg)
		c.logError(ctx, slog.LevelError, e, c.queueName(r), nil)
	}
	c.observeRelease(r, msg, KindGivenBack, err)
}
