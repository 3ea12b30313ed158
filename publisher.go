package artemis

import (
	"context"
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
// may be lost on a multicast address. A publish whose ctx ends between two
// frames of a message larger than one leaves s (an *amqp.Sender) unable to
// carry another transfer: s is closed (Close), and a later publish fails
// until you attach a new Sender; publishes already waiting on s then may
// still follow the incomplete message (a ClientPublisher attaches a new
// link itself, and keeps them off the old one).
func NewPublisher(s Sender, queue string, opts ...PublishOption) *Publisher {
	base := &noOptions
	if len(opts) > 0 {
		base = new(publishConfig)
		for _, o := range opts {
			o.applyPublish(base)
		}
	}
	return &Publisher{path: pathOf(s), queue: queue, base: base}
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
		o.applyPublish(cfg)
	}
	return cfg
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

func (p *Publisher) publish(ctx context.Context, env *Envelope, pm *pooledMessage, cfg *publishConfig) (string, error) {
	// Read before the message goes back to the pool: a Job's envelope may
	// be the pooled message's own (see pooledMessage).
	id, urn := env.Meta.ID, env.URN
	// ended: the publish has a result (refused, or sent with an outcome).
	// A payload validator that ends the caller's goroutine (runtime.Goexit,
	// or a panic) before then leaves nothing to report: nothing was sent,
	// and the Observer must not hear an accepted publish.
	ended := false
	var err error
	if cfg.observer != nil {
		start := cfg.clock()
		defer func() {
			if ended {
				cfg.observePublish(p.queue, urn, id, start, err)
			}
		}()
	}
	msg, pm, err := p.message(ctx, env, pm, cfg)
	if err == nil {
		var state amqp.DeliveryState
		if state, err = p.path.send(ctx, msg); err == nil {
			err = outcomeError(state)
		}
		if err == nil {
			pm.recycle() // a failed send's message may still be held by its link
		}
	}
	ended = true
	if err != nil && !isRefusal(err) {
		err = publishError(p.queue, urn, err)
	}
	callOnOutcome(cfg.onOutcome, id, err)
	if err != nil {
		return "", err
	}
	return id, nil
}

// message projects env onto the message a publish with cfg sends: a pooled
// one (pm, recycled once the path is done with it) when the path reuses
// messages or one was taken for env's data already (pooledFor), else a new
// one (pm nil).
func (p *Publisher) message(ctx context.Context, env *Envelope, pm *pooledMessage, cfg *publishConfig) (*amqp.Message, *pooledMessage, error) {
	if pm != nil || p.reusesMessages(cfg) {
		pm, err := pooled(ctx, env, cfg, &p.lastURN, pm)
		if err != nil {
			return nil, nil, err
		}
		return &pm.msg, pm, nil
	}
	msg, err := newMessage(ctx, env, cfg)
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

func (p *Publisher) publishWithReceipt(ctx context.Context, env *Envelope, pm *pooledMessage, cfg *publishConfig) (*Receipt, error) {
	var start time.Time
	if cfg.observer != nil {
		start = cfg.clock()
	}
	id, urn := env.Meta.ID, env.URN // before env may go back to the pool with pm
	msg, pm, err := p.message(ctx, env, pm, cfg)
	return p.startReceipt(ctx, id, urn, cfg, start, msg, pm, err)
}

// startReceipt writes msg, the projection of the envelope of id and urn
// made for a publish with cfg that began at start, through the path, and
// returns its Receipt; pm is msg's pooled message (nil: none), err the
// failure to make msg.
func (p *Publisher) startReceipt(ctx context.Context, id, urn string, cfg *publishConfig, start time.Time, msg *amqp.Message, pm *pooledMessage, err error) (*Receipt, error) {
	if err == nil {
		r := newReceipt(id, urn, p.queue, cfg.onOutcome)
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
		err = publishError(p.queue, urn, err)
	}
	callOnOutcome(cfg.onOutcome, id, err)
	cfg.observePublish(p.queue, urn, id, start, err)
	return nil, err
}

// pooledFor is the pooled message a Job published with cfg is projected
// onto, taken before its envelope is built so that its data is written
// into the message's buffer: nil when the publish does not reuse messages
// (see Publisher.reusesMessages), or checks its payload (the validator
// may keep the data it is given, which must then be bytes of their own).
func (p *Publisher) pooledFor(cfg *publishConfig) *pooledMessage {
	if cfg.payload != nil || !p.reusesMessages(cfg) {
		return nil
	}
	return messagePool.Get().(*pooledMessage)
}
