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

// publishEncoded is Publish of Encoded bytes: the section 2 projection read
// from body, the body sent as it is (see Encoded), the outcome awaited.
func (p *Publisher) publishEncoded(ctx context.Context, body []byte, cfg *publishConfig) (string, error) {
	var start time.Time
	if cfg.observer != nil {
		start = cfg.clock()
	}
	env, msg, err := encodedMessage(ctx, body, cfg)
	if err == nil {
		var state amqp.DeliveryState
		if state, err = p.path.send(ctx, msg); err == nil {
			err = outcomeError(state)
		}
		if err != nil && !isRefusal(err) {
			err = publishError(p.queue, env.URN, err)
		}
	}
	var urn, id string
	if env != nil {
		urn, id = env.URN, env.Meta.ID
	}
	callOnOutcome(cfg.onOutcome, id, err)
	cfg.observePublish(p.queue, urn, id, start, err)
	if err != nil {
		return "", err
	}
	return id, nil
}

// publishEncodedWithReceipt is PublishWithReceipt of Encoded bytes.
func (p *Publisher) publishEncodedWithReceipt(ctx context.Context, body []byte, cfg *publishConfig) (*Receipt, error) {
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
	return p.startReceipt(ctx, env.Meta.ID, env.URN, cfg, start, msg, nil, nil)
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
