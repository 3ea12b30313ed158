package artemis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/Azure/go-amqp"
)

// Sender is the sending side of an AMQP link. *amqp.Sender satisfies it.
type Sender interface {
	Send(ctx context.Context, msg *amqp.Message, opts *amqp.SendOptions) error
}

// Publisher publishes envelopes to one queue over a Sender. It is safe for
// concurrent use when the Sender is (*amqp.Sender is).
type Publisher struct {
	sender  Sender
	queue   string
	opts    []PublishOption
	lastURN atomic.Pointer[urnAnnotations] // see annotations
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
		cfg.observePublish(p.queue, urn, "", time.Time{}, err)
		return "", err
	}
	return p.publish(ctx, env, &cfg)
}

// PublishEnvelope sends an envelope that is already built (for example one
// being forwarded or redriven) with the section 2 projection, and returns
// its meta.id once the broker accepted it. The envelope keeps its trace id:
// WithTraceID with another id is refused with ErrInvalidConfig.
func (p *Publisher) PublishEnvelope(ctx context.Context, env *Envelope, opts ...PublishOption) (string, error) {
	var cfg publishConfig
	for _, o := range p.opts {
		o(&cfg)
	}
	for _, o := range opts {
		o(&cfg)
	}
	return p.publish(ctx, env, &cfg)
}

func (p *Publisher) publish(ctx context.Context, env *Envelope, cfg *publishConfig) (id string, err error) {
	if cfg.observer != nil {
		start := cfg.clock()
		defer func() { cfg.observePublish(p.queue, env.Job, env.Meta.ID, start, err) }()
	}
	if s, ok := p.sender.(*amqp.Sender); ok {
		if err := checkPublishable(env, cfg); err != nil {
			return "", err
		}
		err = p.sendReused(ctx, s, env, cfg)
	} else {
		msg, merr := newMessage(env, cfg)
		if merr != nil {
			return "", merr
		}
		err = sendConfirmed(ctx, p.sender, msg)
	}
	if err != nil {
		return "", fmt.Errorf("babelqueue: publish %s to %s: %w", env.Job, p.queue, err)
	}
	return env.Meta.ID, nil
}

// pooledMessage is a projected message with its body buffer, reused from
// one publish to the next.
type pooledMessage struct {
	messageBlock
	body []byte
}

var messagePool = sync.Pool{New: func() any { return new(pooledMessage) }}

// maxPooledBody bounds the body buffers kept for reuse.
const maxPooledBody = 64 << 10

// sendReused sends env's projection through s, which must only read the
// message, and only while Send runs. An *amqp.Sender does: go-amqp encodes
// the message into the link's own buffer before the transfer and keeps no
// reference to it. So the message, the memory it points to and the body
// buffer come from a pool, and the maps that do not vary from one publish
// to the next are shared, never written: the four bq_ properties of a fresh
// envelope and the annotation of the URN published last. The message is
// the one newMessage makes, byte for byte.
//
// A message whose send failed is not reused: with its link gone, go-amqp
// may still hold a transfer that points into it.
func (p *Publisher) sendReused(ctx context.Context, s Sender, env *Envelope, cfg *publishConfig) error {
	pm := messagePool.Get().(*pooledMessage)
	if hint := env.encodedSizeHint(); cap(pm.body) < hint {
		pm.body = make([]byte, 0, hint)
	}
	pm.body = env.appendEncode(pm.body[:0])
	pm.project(env, unsafe.String(unsafe.SliceData(pm.body), len(pm.body)),
		reusedProperties(env, cfg), p.annotations(env.Job, cfg))
	err := sendConfirmed(ctx, s, &pm.msg)
	if err == nil && cap(pm.body) <= maxPooledBody {
		pm.messageBlock = messageBlock{}
		messagePool.Put(pm)
	}
	return err
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

// PublishOption configures one publish: Publisher.Publish and
// PublishEnvelope, ClientPublisher's, and the projection NewMessage. Given
// to NewPublisher or Client.Publisher, an option applies to every publish,
// before the per-call ones.
type PublishOption func(*publishConfig)

type publishConfig struct {
	traceID string
	delay   time.Duration
	headers map[string]string
	dupID   bool
	now     func() time.Time
	// observer hears the publish (WithPublishObserver).
	observer Observer
}

// WithTraceID reuses a trace id (trimmed) instead of minting a fresh one.
// It is how a service continues the trace of the message it is handling.
// It applies to Publish, which builds the envelope; PublishEnvelope and
// NewMessage, whose envelope already has a trace id, refuse a different one
// with ErrInvalidConfig rather than ignore it.
func WithTraceID(id string) PublishOption {
	return func(c *publishConfig) { c.traceID = id }
}

// WithDelay schedules the message for delivery d from now, through Artemis's
// x-opt-delivery-time annotation. A delay <= 0 delivers at once.
func WithDelay(d time.Duration) PublishOption {
	return func(c *publishConfig) { c.delay = d }
}

// WithHeaders adds out-of-band headers (W3C traceparent, tracestate, ...) as
// string application properties. Blank keys and values are dropped; a header
// named like a contract property (bq_...) loses to the contract's value. A
// HeaderCarrier is a map[string]string, so it can be passed as it is.
func WithHeaders(h map[string]string) PublishOption {
	return func(c *publishConfig) {
		if len(h) == 0 {
			return
		}
		if c.headers == nil {
			c.headers = make(map[string]string, len(h))
		}
		for k, v := range h {
			c.headers[k] = v
		}
	}
}

// WithDuplicateDetection sets Artemis's duplicate-id property (_AMQ_DUPL_ID)
// to meta.id, so a publish retried after an ambiguous failure is stored once.
func WithDuplicateDetection() PublishOption {
	return func(c *publishConfig) { c.dupID = true }
}

// deliveryTime is the x-opt-delivery-time of a delayed publish (Unix ms).
func (c *publishConfig) deliveryTime() int64 {
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	return now().Add(c.delay).UnixMilli()
}
