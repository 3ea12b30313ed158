package artemis

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/Azure/go-amqp"
)

// Publisher publishes envelopes to one queue over a Sender. It is safe for
// concurrent use when the Sender is (*amqp.Sender is).
type Publisher struct {
	path    sendPath // the one seam down to the link: a bare link's, or a Client's sender
	queue   string
	base    *publishConfig // the Publisher's options, applied once (never written after)
	lastURN urnCache       // the annotations of the URN published last (see pooled)
}

// NewPublisher returns a Publisher that writes to s and stamps queue into
// meta.queue. Options given here apply to every Publish, before the
// per-call options (for example WithDuplicateDetection).
//
// Attach s to the queue's address with the "queue" capability, so Artemis
// makes an anycast queue; otherwise messages sent before a receiver attaches
// may be lost on a multicast address.
func NewPublisher(s Sender, queue string, opts ...PublishOption) *Publisher {
	base := &noOptions
	if len(opts) > 0 {
		base = new(publishConfig)
		for _, o := range opts {
			o(base)
		}
	}
	return &Publisher{path: pathOf(s), queue: queue, base: base}
}

// Publish builds an envelope for urn and data, projects it onto an AMQP
// message and sends it. It returns meta.id only after the broker accepted
// the transfer: a rejected, released or modified outcome is an error
// matching ErrNotAccepted (when the Sender is an *amqp.Sender or an
// OutcomeSender). data may be a struct, a map, a json.RawMessage or nil.
// opts are PublishOptions and EnvelopeOptions (see BuildOption): pass
// EnvelopeTraceID to continue a trace.
//
// Publish is PublishWithReceipt followed by Receipt.Wait, with the wait done
// on the calling goroutine. To have many transfers in flight from one
// goroutine, use PublishWithReceipt.
func (p *Publisher) Publish(ctx context.Context, urn string, data any, opts ...BuildOption) (string, error) {
	if p.unusable() {
		return "", errNotBuilt
	}
	ecfg := envelopeConfig{queue: p.queue}
	cfg := p.buildConfig(opts, &ecfg)
	env, err := newEnvelope(urn, data, &ecfg)
	if err != nil {
		cfg.observePublish(p.queue, urn, "", time.Time{}, err)
		return "", err
	}
	return p.publish(ctx, env, cfg)
}

// PublishEnvelope sends an envelope that is already built (for example one
// being forwarded or redriven) with the section 2 projection, and returns
// its meta.id once the broker accepted it. The envelope keeps its trace id
// (set it when building the envelope, with EnvelopeTraceID).
func (p *Publisher) PublishEnvelope(ctx context.Context, env *Envelope, opts ...PublishOption) (string, error) {
	if p.unusable() {
		return "", errNotBuilt
	}
	if env == nil {
		return "", fmt.Errorf("%w: the envelope is nil", ErrInvalidEnvelope)
	}
	return p.publish(ctx, env, p.config(opts))
}

// unusable reports a nil Publisher, or one declared as a zero value (no
// sender): its methods return errNotBuilt rather than panic.
func (p *Publisher) unusable() bool { return p == nil || p.path == nil }

// config is the Publisher's configuration with opts applied on top. Without
// per-call options it is the Publisher's own, applied once by NewPublisher
// (or the shared zero configuration): a config handed to the options'
// closures escapes to the heap, one allocation per publish that has them.
func (p *Publisher) config(opts []PublishOption) *publishConfig {
	if len(opts) == 0 {
		return p.baseConfig()
	}
	cfg := p.copyConfig(new(publishConfig))
	for _, o := range opts {
		o(cfg)
	}
	return cfg
}

// buildConfig is config for a publish that builds its envelope: the
// PublishOptions among opts go on top of the Publisher's configuration,
// the EnvelopeOptions on top of ecfg. ecfg stays where the caller has it
// (its stack): the options' closures write to copies of both, made in one
// allocation when there are options, as config makes one.
func (p *Publisher) buildConfig(opts []BuildOption, ecfg *envelopeConfig) *publishConfig {
	if len(opts) == 0 {
		return p.baseConfig()
	}
	var (
		own = new(builtConfig)
		cfg *publishConfig
	)
	own.envelope = *ecfg
	for _, o := range opts {
		switch o := o.(type) {
		case PublishOption:
			if cfg == nil {
				cfg = p.copyConfig(&own.publish)
			}
			o(cfg)
		case EnvelopeOption:
			o(&own.envelope)
		}
	}
	*ecfg = own.envelope
	if cfg == nil {
		return p.baseConfig()
	}
	return cfg
}

// builtConfig holds the copies buildConfig's options write to.
type builtConfig struct {
	publish  publishConfig
	envelope envelopeConfig
}

// baseConfig is the Publisher's own configuration, never to be written.
func (p *Publisher) baseConfig() *publishConfig {
	if p.base == nil {
		return &noOptions // a Publisher built by hand, with a sender
	}
	return p.base
}

// copyConfig copies the Publisher's configuration to cfg, for the per-call
// options to write to, and returns cfg.
func (p *Publisher) copyConfig(cfg *publishConfig) *publishConfig {
	base := p.baseConfig()
	*cfg = *base
	if base.headers != nil {
		cfg.headers = maps.Clone(base.headers) // WithHeaders adds to it
	}
	return cfg
}

var noOptions publishConfig

func (p *Publisher) publish(ctx context.Context, env *Envelope, cfg *publishConfig) (id string, err error) {
	if cfg.observer != nil {
		start := cfg.clock()
		defer func() { cfg.observePublish(p.queue, env.Job, env.Meta.ID, start, err) }()
	}
	msg, pm, err := p.message(ctx, env, cfg)
	if err == nil {
		var state amqp.DeliveryState
		if state, err = p.path.send(ctx, msg); err == nil {
			err = outcomeError(state)
		}
		if err == nil {
			pm.recycle() // a failed send's message may still be held by its link
		}
	}
	if err != nil && !isRefusal(err) {
		err = publishError(p.queue, env.Job, err)
	}
	callOnOutcome(cfg.onOutcome, env.Meta.ID, err)
	if err != nil {
		return "", err
	}
	return env.Meta.ID, nil
}

// message projects env onto the message a publish with cfg sends: a pooled
// one (pm, recycled once the path is done with it) when the path reuses
// messages, else a new one (pm nil).
func (p *Publisher) message(ctx context.Context, env *Envelope, cfg *publishConfig) (msg *amqp.Message, pm *pooledMessage, err error) {
	if p.reusesMessages(cfg) {
		if pm, err = pooled(ctx, env, cfg, &p.lastURN); err != nil {
			return nil, nil, err
		}
		return &pm.msg, pm, nil
	}
	msg, err = newMessage(ctx, env, cfg)
	return msg, nil, err
}

// reusesMessages reports whether a publish with cfg may project its
// envelope onto a pooled message (see pooledMessage): its path reads the
// message only while the transfer is written, an *amqp.Sender or a
// ClientPublisher's go-amqp link; the Client's keeps a message with a
// duplicate id for a resend after a loss, so that one is never pooled.
func (p *Publisher) reusesMessages(cfg *publishConfig) bool {
	return p.path.reuses(cfg.carriesDuplicateID())
}

// PublishWithReceipt builds an envelope for urn and data, as Publish does,
// writes the transfer and returns at once, without waiting for the broker's
// outcome: Receipt.Wait does that. Everything Publish does to the message
// (the section 2 projection, headers, delay, trace id, the other options)
// holds. An error here means nothing was sent: the envelope or an option
// was refused, or the transfer could not be written.
//
// Over an *amqp.Sender the transfer is written with SendWithReceipt, which
// blocks while the link has no credit: the transfers in flight are bounded
// by the credit the broker grants the link (Artemis: 1,000 by default).
// Over any other Sender (an OutcomeSender, a plain Sender, a fake),
// PublishWithReceipt sends and waits for the outcome before it returns, and
// the receipt is already resolved; a ClientPublisher's receipts are
// pipelined (see Client.Publisher).
//
// Every receipt is resolved, whether or not anyone waits on it: a goroutine
// per link (started when a receipt written on it is pending, gone when none
// is) waits for that link's outcomes in the order its transfers were
// written. A Publisher over an *amqp.Sender has one link; a
// ClientPublisher has one per link it writes on (one per cluster member,
// and a new one after each re-attach), so a link that stops settling holds
// back only its own receipts, and the callbacks of different links may run
// at the same time. The outcome goes to the WithOnOutcome callback when
// there is one; without
// one, a failure of a receipt whose Wait was never called is logged to
// slog.Default() at warn level, so nothing is lost silently.
// A receipt never waited on is collected as garbage once resolved.
//
// Safe for concurrent use when the Sender is (*amqp.Sender is).
func (p *Publisher) PublishWithReceipt(ctx context.Context, urn string, data any, opts ...BuildOption) (*Receipt, error) {
	if p.unusable() {
		return nil, errNotBuilt
	}
	ecfg := envelopeConfig{queue: p.queue}
	cfg := p.buildConfig(opts, &ecfg)
	env, err := newEnvelope(urn, data, &ecfg)
	if err != nil {
		cfg.observePublish(p.queue, urn, "", time.Time{}, err)
		return nil, err
	}
	return p.publishWithReceipt(ctx, env, cfg)
}

// PublishEnvelopeWithReceipt is PublishEnvelope with a receipt: it sends an
// envelope that is already built and returns once the transfer is written.
// See PublishWithReceipt.
func (p *Publisher) PublishEnvelopeWithReceipt(ctx context.Context, env *Envelope, opts ...PublishOption) (*Receipt, error) {
	if p.unusable() {
		return nil, errNotBuilt
	}
	if env == nil {
		return nil, fmt.Errorf("%w: the envelope is nil", ErrInvalidEnvelope)
	}
	return p.publishWithReceipt(ctx, env, p.config(opts))
}

func (p *Publisher) publishWithReceipt(ctx context.Context, env *Envelope, cfg *publishConfig) (*Receipt, error) {
	var start time.Time
	if cfg.observer != nil {
		start = cfg.clock()
	}
	msg, pm, err := p.message(ctx, env, cfg)
	return p.startReceipt(ctx, env, cfg, start, msg, pm, err)
}

// startReceipt writes msg, env's projection made for a publish with cfg
// that began at start, through the path, and returns its Receipt; pm is
// msg's pooled message (nil: none), err the failure to make msg.
func (p *Publisher) startReceipt(ctx context.Context, env *Envelope, cfg *publishConfig, start time.Time, msg *amqp.Message, pm *pooledMessage, err error) (*Receipt, error) {
	if err == nil {
		r := &Receipt{id: env.Meta.ID, urn: env.Job, queue: p.queue, onOutcome: cfg.onOutcome, done: make(chan struct{})}
		if cfg.observer != nil {
			r.observed, r.start = cfg, start
		}
		var kept bool
		if kept, err = p.path.start(ctx, msg, r); err == nil {
			if !kept {
				pm.recycle() // written, and not kept for a resend
			}
			return r, nil
		}
	}
	if !isRefusal(err) {
		err = publishError(p.queue, env.Job, err)
	}
	callOnOutcome(cfg.onOutcome, env.Meta.ID, err)
	cfg.observePublish(p.queue, env.Job, env.Meta.ID, start, err)
	return nil, err
}
