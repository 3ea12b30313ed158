package artemis

import (
	"context"
	"fmt"

	"github.com/Azure/go-amqp"
)

// Sender is the sending side of an AMQP link. *amqp.Sender satisfies it.
type Sender interface {
	Send(ctx context.Context, msg *amqp.Message, opts *amqp.SendOptions) error
}

// Publisher publishes envelopes to one queue over a Sender. It is safe for
// concurrent use when the Sender is (*amqp.Sender is).
type Publisher struct {
	sender Sender
	queue  string
	opts   []PublishOption
}

// NewPublisher returns a Publisher that writes to s and stamps queue into
// meta.queue. Options given here apply to every Publish, before the
// per-call options (for example WithDuplicateDetection).
//
// Attach s to the queue's address with the "queue" capability, so Artemis
// makes an anycast queue; otherwise messages sent before a receiver attaches
// may be lost on a multicast address.
func NewPublisher(s Sender, queue string, opts ...PublishOption) *Publisher {
	return &Publisher{sender: s, queue: queue, opts: opts}
}

// Publish builds an envelope for urn and data, projects it onto an AMQP
// message and sends it. It returns meta.id only after the broker accepted
// the transfer: a rejected, released or modified outcome is an error
// matching ErrNotAccepted (when the Sender is an *amqp.Sender or an
// OutcomeSender). data may be a struct, a map, a json.RawMessage or nil.
func (p *Publisher) Publish(ctx context.Context, urn string, data any, opts ...PublishOption) (string, error) {
	var cfg publishConfig
	for _, o := range p.opts {
		o(&cfg)
	}
	for _, o := range opts {
		o(&cfg)
	}
	env, err := newEnvelope(urn, data, &envelopeConfig{traceID: cfg.traceID, queue: p.queue})
	if err != nil {
		return "", err
	}
	msg, err := newMessage(env, &cfg)
	if err != nil {
		return "", err
	}
	if err := sendConfirmed(ctx, p.sender, msg); err != nil {
		return "", fmt.Errorf("babelqueue: publish %s to %s: %w", env.Job, p.queue, err)
	}
	return env.Meta.ID, nil
}

// PublishEnvelope sends an envelope that is already built (for example one
// being forwarded or redriven) with the section 2 projection, and returns
// its meta.id once the broker accepted it.
func (p *Publisher) PublishEnvelope(ctx context.Context, env *Envelope, opts ...PublishOption) (string, error) {
	var cfg publishConfig
	for _, o := range p.opts {
		o(&cfg)
	}
	for _, o := range opts {
		o(&cfg)
	}
	msg, err := newMessage(env, &cfg)
	if err != nil {
		return "", err
	}
	if err := sendConfirmed(ctx, p.sender, msg); err != nil {
		return "", fmt.Errorf("babelqueue: publish %s to %s: %w", env.Job, p.queue, err)
	}
	return env.Meta.ID, nil
}
