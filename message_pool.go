// The message pool: a publish over a link that reads its message only while
// the transfer is written projects its envelope onto a message reused from
// one publish to the next (see pooledMessage). Measured to pay: BENCHMARKS.md,
// "The message pool".

package artemis

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"
)

// pooled checks env and cfg and projects env onto a pooled message, with
// the annotations of urns when its URN is the one published last: pm, the
// one env's data was written into (pooledFor), else one taken now. It is
// the one way into the pool: the message goes back with recycle once the
// link is done with it, or now when env or cfg is refused.
func pooled(ctx context.Context, env *Envelope, cfg *publishConfig, urns *urnCache, pm *pooledMessage) (*pooledMessage, error) {
	env, err := checkPublishable(ctx, env, cfg)
	if err != nil {
		pm.recycle()
		return nil, err
	}
	if pm == nil {
		pm = messagePool.Get().(*pooledMessage)
	}
	if hint := env.encodedSizeHint(); cap(pm.body) < hint {
		pm.body = make([]byte, 0, hint)
	}
	pm.body = env.appendEncode(pm.body[:0])
	pm.project(env, stringView(pm.body),
		reusedProperties(env, cfg), urns.annotations(env.URN, cfg))
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
// A Job's envelope is the pooled message's own (env), and its struct data
// is written into the message's data buffer rather than an array of its
// own (Publisher.pooledFor): that envelope is the publisher's, never handed
// out, and what the publish reports of it (meta.id, the URN) is read before
// the message is recycled. A PayloadValidator, which is given the envelope
// and may keep it, makes the publish take the usual way.
//
// A message whose send failed is not reused: with its link gone, go-amqp
// may still hold a transfer that points into it.
type pooledMessage struct {
	messageBlock
	body []byte
	data []byte   // a Job's data, encoded into body
	env  Envelope // a Job's envelope, projected onto messageBlock
}

var messagePool = sync.Pool{New: func() any { return new(pooledMessage) }}

// maxPooledBody bounds the body buffers kept for reuse.
const maxPooledBody = 64 << 10

// recycle gives pm back to the pool (nil: nothing to do).
func (pm *pooledMessage) recycle() {
	if pm == nil || cap(pm.body) > maxPooledBody || cap(pm.data) > maxPooledBody {
		return
	}
	pm.messageBlock = messageBlock{}
	pm.env = Envelope{}
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

// urnCache holds the annotations of the URN a Publisher published last.
type urnCache struct{ atomic.Pointer[urnAnnotations] }

// annotations returns the message annotations for urn: the map of the URN
// published last when there is no delay (it is never written), else a new
// one.
func (c *urnCache) annotations(urn string, cfg *publishConfig) amqp.Annotations {
	if cfg.delay > 0 {
		return publishAnnotations(urn, cfg)
	}
	if last := c.Load(); last != nil && last.urn == urn {
		return last.annotations
	}
	a := &urnAnnotations{urn: urn, annotations: amqp.Annotations{AnnotationJMSType: urn}}
	c.Store(a)
	return a.annotations
}
