// Publishing an envelope that is already encoded, byte for byte: what a
// transactional outbox's relay needs, as the bytes it stored are the
// message.

package artemis

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/Azure/go-amqp"
)

// PublishEncodedWithReceipt is PublishEnvelopeWithReceipt for an envelope
// that is already encoded: body, the canonical encoding of a valid envelope
// (what Envelope.Encode returns), goes out as the message body exactly as
// it is, and the section 2 projection (message-id, correlation-id, URN,
// creation time, the bq_ properties) is read from it. The options apply as
// they do to PublishEnvelopeWithReceipt: WithDuplicateDetection sets
// _AMQ_DUPL_ID to the body's meta.id, WithDelay, WithGroupID, WithHeaders.
//
// A body that does not decode, fails Validate, or is not the canonical
// encoding of the envelope it holds is refused with an error matching
// ErrInvalidEnvelope, and nothing is sent. body is not kept after the call
// returns.
func (p *Publisher) PublishEncodedWithReceipt(ctx context.Context, body []byte, opts ...PublishOption) (*Receipt, error) {
	if p.unusable() {
		return nil, errNotBuilt
	}
	cfg := p.config(opts)
	var start time.Time
	if cfg.observer != nil {
		start = cfg.clock()
	}
	env, msg, err := encodedMessage(ctx, body, cfg)
	if err != nil {
		var urn, id string
		if env != nil {
			urn, id = env.URN, env.Meta.ID
		}
		callOnOutcome(cfg.onOutcome, id, err)
		cfg.observePublish(p.queue, urn, id, start, err)
		return nil, err
	}
	pt, err := startTransfer(ctx, p.sender, msg)
	return p.receipt(env, cfg, start, pt, err)
}

// encodedMessage checks body (the payload check ending with ctx) and
// projects it, as it is, onto a message.
func encodedMessage(ctx context.Context, body []byte, cfg *publishConfig) (*Envelope, *amqp.Message, error) {
	env, err := Decode(body)
	if err != nil {
		return nil, nil, err
	}
	if err = env.Validate(); err != nil {
		return env, nil, err
	}
	sent, err := checkPublishable(ctx, env, cfg)
	if err != nil {
		return env, nil, err
	}
	if sent != env {
		return env, nil, fmt.Errorf("%w: the payload validator protects fields of %s's data, which an encoded body cannot have done to it: publish the envelope or its data", ErrInvalidConfig, env.URN)
	}
	if !bytes.Equal(env.appendEncode(make([]byte, 0, len(body))), body) {
		return env, nil, fmt.Errorf("%w: the body is not the canonical encoding of its envelope (Envelope.Encode)", ErrInvalidEnvelope)
	}
	b := new(messageBlock)
	b.project(env, string(body), publishProperties(env, cfg), publishAnnotations(env.URN, cfg))
	b.applyOptions(cfg)
	return env, &b.msg, nil
}
