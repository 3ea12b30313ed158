package artemis

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/Azure/go-amqp"
)

// Publisher publishes envelopes to one queue over a Sender. It is safe for
// concurrent use when the Sender is (*amqp.Sender is).
type Publisher struct {
	sender   Sender
	queue    string
	base     *publishConfig                 // the Publisher's options, applied once (never written after)
	lastURN  atomic.Pointer[urnAnnotations] // see annotations
	receipts resolver                       // PublishWithReceipt's pending outcomes on sender (see resolverOf)
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
			o.applyPublish(base)
		}
	}
	return &Publisher{sender: s, queue: queue, base: base}
}

// unusable reports a nil Publisher, or one declared as a zero value (no
// sender): its methods return errNotBuilt rather than panic.
func (p *Publisher) unusable() bool { return p == nil || p.sender == nil }

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

func (p *Publisher) publish(ctx context.Context, env *Envelope, cfg *publishConfig) (id string, err error) {
	if cfg.observer != nil {
		start := cfg.clock()
		defer func() { cfg.observePublish(p.queue, env.URN, env.Meta.ID, start, err) }()
	}
	if p.reusesMessages(cfg) {
		err = p.sendReused(ctx, p.sender, env, cfg)
	} else {
		var msg *amqp.Message
		if msg, err = newMessage(ctx, env, cfg); err == nil {
			err = sendConfirmed(ctx, p.sender, msg)
		}
	}
	if err != nil && !isRefusal(err) {
		err = publishError(p.queue, env.URN, err)
	}
	callOnOutcome(cfg.onOutcome, env.Meta.ID, err)
	if err != nil {
		return "", err
	}
	return env.Meta.ID, nil
}

// reusesMessages reports whether a publish with cfg may project its
// envelope onto a pooled message (see pooledMessage): the sender is an
// *amqp.Sender, or a ClientPublisher's, whose go-amqp links read the
// message only while the transfer is written, publishing a message without
// a duplicate id (one with, from WithDuplicateDetection or a header, is
// kept for a resend after a loss: see clientSender.afterLoss).
func (p *Publisher) reusesMessages(cfg *publishConfig) bool {
	switch s := p.sender.(type) {
	case *amqp.Sender:
		return true
	case transientReader:
		return !cfg.carriesDuplicateID() && s.readsOnlyWhileWriting()
	}
	return false
}

// transientReader is a Sender that can tell whether it reads a message only
// while the transfer is written, as an *amqp.Sender does (a
// ClientPublisher's).
type transientReader interface {
	readsOnlyWhileWriting() bool
}

// sendReused sends env's projection through s, which must only read the
// message while Send runs, with a pooled message (see pooledMessage).
func (p *Publisher) sendReused(ctx context.Context, s Sender, env *Envelope, cfg *publishConfig) error {
	pm, err := p.reused(ctx, env, cfg)
	if err != nil {
		return err
	}
	if err = sendConfirmed(ctx, s, &pm.msg); err == nil {
		pm.recycle()
	}
	return err
}

// startReused is sendReused without the wait for the outcome: the message
// goes back to the pool once the transfer is written.
func (p *Publisher) startReused(ctx context.Context, s Sender, env *Envelope, cfg *publishConfig) (pendingTransfer, error) {
	pm, err := p.reused(ctx, env, cfg)
	if err != nil {
		return pendingTransfer{}, err
	}
	pt, err := startTransfer(ctx, s, &pm.msg)
	if err == nil && pt.lost == nil && pt.retry == nil {
		// Written, and not kept for a resend (reusesMessages keeps such
		// messages out of the pool; this is the second lock).
		pm.recycle()
	}
	return pt, err
}

// reused checks env and cfg and projects env onto a pooled message.
func (p *Publisher) reused(ctx context.Context, env *Envelope, cfg *publishConfig) (*pooledMessage, error) {
	env, err := checkPublishable(ctx, env, cfg)
	if err != nil {
		return nil, err
	}
	pm := messagePool.Get().(*pooledMessage)
	if hint := env.encodedSizeHint(); cap(pm.body) < hint {
		pm.body = make([]byte, 0, hint)
	}
	pm.body = env.appendEncode(pm.body[:0])
	pm.project(env, unsafe.String(unsafe.SliceData(pm.body), len(pm.body)),
		reusedProperties(env, cfg), p.annotations(env.URN, cfg))
	pm.applyOptions(cfg)
	return pm, nil
}

// pooledMessage is a projected message with its body buffer, reused from
// one publish to the next.
//
// Reuse relies on (*amqp.Sender).Send and SendWithReceipt reading the
// message only while they run: go-amqp v1.7.0 (sender.go, Sender.send)
// marshals it into the link's own buffer and copies each frame's payload
// out of that buffer before the transfer is queued, and keeps no reference
// to the message. go-amqp does not document this, so
// TestPooledMessageIsNotKeptByGoAMQP (integration/publish_test.go) checks it
// on a real link, by overwriting every reused message as soon as the send
// returned, and TestGoAMQPVersionIsTheOneCheckedForReuse pins the version it
// was checked against. So the message, the memory it points to and the body
// buffer come from a pool, and the maps that do not vary from one publish
// to the next are shared, never written: the four bq_ properties of a fresh
// envelope and the annotation of the URN published last. The message is the
// one newMessage makes, byte for byte.
//
// A message whose send failed is not reused: with its link gone, go-amqp
// may still hold a transfer that points into it.
type pooledMessage struct {
	messageBlock
	body []byte
}

var messagePool = sync.Pool{New: func() any { return new(pooledMessage) }}

// maxPooledBody bounds the body buffers kept for reuse.
const maxPooledBody = 64 << 10

// recycle gives pm back to the pool (nil: nothing to do).
func (pm *pooledMessage) recycle() {
	if pm == nil || cap(pm.body) > maxPooledBody {
		return
	}
	pm.messageBlock = messageBlock{}
	messagePool.Put(pm)
}

// freshProperties are the application properties of every envelope this
// library makes (schema 1, lang go, attempts 0) when no header or duplicate
// id is added. Shared by reused messages: never written.
var freshProperties = map[string]any{
	PropSchemaVersion: boxedSchemaVersion,
	PropSourceLang:    boxedLang,
	PropAttempts:      boxedAttempts[0],
	PropAppID:         AppID,
}

func reusedProperties(env *Envelope, cfg *publishConfig) map[string]any {
	if len(cfg.headers) == 0 && !cfg.dupID && env.Meta.SchemaVersion == SchemaVersion &&
		env.Meta.Lang == Lang && env.Attempts == 0 {
		return freshProperties
	}
	return publishProperties(env, cfg)
}

// urnAnnotations is the annotations map of one URN, shared read only.
type urnAnnotations struct {
	urn         string
	annotations amqp.Annotations
}

// annotations returns the message annotations for urn: the map of the URN
// published last when there is no delay (it is never written), else a new
// one.
func (p *Publisher) annotations(urn string, cfg *publishConfig) amqp.Annotations {
	if cfg.delay > 0 {
		return publishAnnotations(urn, cfg)
	}
	if last := p.lastURN.Load(); last != nil && last.urn == urn {
		return last.annotations
	}
	a := &urnAnnotations{urn: urn, annotations: amqp.Annotations{AnnotationJMSType: urn}}
	p.lastURN.Store(a)
	return a.annotations
}

func (p *Publisher) publishWithReceipt(ctx context.Context, env *Envelope, cfg *publishConfig) (*Receipt, error) {
	var pt pendingTransfer
	var err error
	var start time.Time
	if cfg.observer != nil {
		start = cfg.clock()
	}
	if p.reusesMessages(cfg) {
		pt, err = p.startReused(ctx, p.sender, env, cfg)
	} else {
		var msg *amqp.Message
		if msg, err = newMessage(ctx, env, cfg); err == nil {
			pt, err = startTransfer(ctx, p.sender, msg)
		}
	}
	return p.receipt(env, cfg, start, pt, err)
}

// receipt turns a transfer started at start (or its failure, err) into the
// publish's Receipt.
func (p *Publisher) receipt(env *Envelope, cfg *publishConfig, start time.Time, pt pendingTransfer, err error) (*Receipt, error) {
	if err != nil {
		if !isRefusal(err) {
			err = publishError(p.queue, env.URN, err)
		}
		callOnOutcome(cfg.onOutcome, env.Meta.ID, err)
		cfg.observePublish(p.queue, env.URN, env.Meta.ID, start, err)
		return nil, err
	}
	r := &Receipt{id: env.Meta.ID, urn: env.URN, queue: p.queue, onOutcome: cfg.onOutcome, done: make(chan struct{})}
	if cfg.observer != nil {
		r.observed, r.start = cfg, start
	}
	if !pt.pending() {
		r.resolve(pt.state, nil) // the outcome came with the send
		return r, nil
	}
	r.pending = pt
	p.resolverOf(&pt).add(r)
	return r, nil
}

// resolverOf is the resolver that awaits pt's outcome: its owner's own
// (one link's), else the Publisher's (its Sender's single link).
func (p *Publisher) resolverOf(pt *pendingTransfer) *resolver {
	if o, ok := pt.owner.(ownResolver); ok {
		return o.receipts()
	}
	return &p.receipts
}
