// The publish options: PublishOption, the configuration it sets, and the
// checks and clocks that configuration answers for. The projection, the
// publishers and the Client's publisher all read it.

package artemis

import (
	"context"
	"fmt"
	"math"
	"time"
)

// PublishOption configures how a message is sent: every publish of a
// Publisher or a ClientPublisher, and the projection NewMessage. Given to
// NewPublisher or Client.Publisher, an option applies to every publish,
// before the per-call ones.
type PublishOption interface{ applyPublish(c *publishConfig) }

// publishOption is the PublishOption of a function.
type publishOption func(*publishConfig)

func (f publishOption) applyPublish(c *publishConfig) { f(c) }

type publishConfig struct {
	delay       time.Duration
	headers     map[string]string
	dupID       bool
	ttl         time.Duration
	priority    int
	prioritySet bool
	groupID     string
	onOutcome   func(id string, err error)
	now         func() time.Time
	// observer hears the publish (WithObserver).
	observer Observer
	payload  PayloadValidator // checks data (WithPayloadValidator)
}

// WithDelay schedules the message for delivery d from now, through Artemis's
// x-opt-delivery-time annotation. A delay <= 0 delivers at once.
// Default: 0, at once.
func WithDelay(d time.Duration) PublishOption {
	return publishOption(func(c *publishConfig) { c.delay = d })
}

// WithHeaders adds out-of-band headers (W3C traceparent, tracestate, ...) as
// string application properties. Blank keys and values are dropped; a header
// named like a contract property (bq_...) loses to the contract's value. A
// HeaderCarrier is a map[string]string, so it can be passed as it is.
// Default: none.
func WithHeaders(h map[string]string) PublishOption {
	return publishOption(func(c *publishConfig) {
		if len(h) == 0 {
			return
		}
		if c.headers == nil {
			c.headers = make(map[string]string, len(h))
		}
		for k, v := range h {
			c.headers[k] = v
		}
	})
}

// WithDuplicateDetection sets Artemis's duplicate-id property (_AMQ_DUPL_ID)
// to meta.id, so a publish retried after an ambiguous failure is stored once.
// Artemis checks and records the id in two steps, so a resend routed at the
// same moment as the first copy (still being routed from a cut connection)
// can be stored too; a consumer that must not see it twice deduplicates on
// meta.id (docs/publishing.md). Default: off.
func WithDuplicateDetection() PublishOption {
	return publishOption(func(c *publishConfig) { c.dupID = true })
}

// WithTTL gives the message a time to live: the header ttl, in
// milliseconds (a d below a millisecond is rounded up to one), and the
// absolute expiry time, meta.created_at + d (the moment of the publish when
// the envelope has no created_at). Artemis sets the message's expiry from
// them (JMSExpiration) and drops or moves an expired message to its expiry
// address instead of delivering it; the absolute time is the one that
// survives a cluster moving the message to another member (the header ttl
// starts again there), so it expires on time. It is computed from the
// publisher's clock. d = 0 means no
// expiry; a negative d, or one over the header's 2^32-1 ms (49.7 days), is
// refused with ErrInvalidConfig when publishing. Dead-letter copies never
// carry it. Default: 0, no expiry.
func WithTTL(d time.Duration) PublishOption {
	return publishOption(func(c *publishConfig) { c.ttl = d })
}

// WithPriority sets the header priority, 0 (lowest) to 9 (JMSPriority).
// Artemis delivers higher priorities first among the messages waiting in a
// queue. A priority outside 0-9 is refused with ErrInvalidConfig when
// publishing. Default: 4, as in JMS.
func WithPriority(p int) PublishOption {
	return publishOption(func(c *publishConfig) { c.priority, c.prioritySet = p, true })
}

// WithGroupID puts the message in a message group: properties.group-id,
// which JMS peers see as JMSXGroupID. Artemis hands all messages of one
// group to one consumer at a time, in order. An empty key means no group.
// Default: no group.
func WithGroupID(key string) PublishOption {
	return publishOption(func(c *publishConfig) { c.groupID = key })
}

// WithOnOutcome calls f once with the outcome of each publish: nil when the
// broker accepted it, else the error Publish or Receipt.Wait returns
// (matching ErrNotAccepted for a rejected, released or modified transfer).
// For PublishWithReceipt it is called when the outcome arrives, whether or
// not the receipt is waited on, from the goroutine that resolves the
// receipts of the link it was written on (in the order they were written
// there): it must not block for long, or it holds up the receipts behind
// it. A Client's publisher has a link per cluster member (and a new one
// after a re-attach), so f may be called from several goroutines at once
// and must be safe for concurrent use. For Publish, for a publish refused
// or not written, and for a Sender
// that answers synchronously, it is called on the calling goroutine before
// the call returns; a publish refused before it had an id (no envelope: a
// nil one, a Job or Encoded bytes that are none) is told with the id "". A panic in f is recovered and logged to slog.Default()
// at error level; it changes neither the publish nor any receipt.
// Given to NewPublisher, it sees every publish: a place to count outcomes or
// log the failures of receipts nobody waits on. Default: none.
func WithOnOutcome(f func(id string, err error)) PublishOption {
	return publishOption(func(c *publishConfig) { c.onOutcome = f })
}

// maxTTL is the largest header ttl: a uint32 of milliseconds.
const maxTTL = time.Duration(math.MaxUint32) * time.Millisecond

// checkOptions refuses option values that cannot go on the wire.
func (c *publishConfig) checkOptions() error {
	if c.ttl < 0 || c.ttl > maxTTL {
		return fmt.Errorf("%w: WithTTL(%s): the time to live must be between 0 and %s", ErrInvalidConfig, c.ttl, maxTTL)
	}
	if c.prioritySet && (c.priority < 0 || c.priority > 9) {
		return fmt.Errorf("%w: WithPriority(%d): the priority must be between 0 and 9", ErrInvalidConfig, c.priority)
	}
	return checkHeaders(c.headers)
}

// ttlHeader is the header ttl of cfg's time to live, rounded up to a
// millisecond (0: none).
func (c *publishConfig) ttlHeader() time.Duration {
	if c.ttl <= 0 {
		return 0
	}
	return (c.ttl + time.Millisecond - 1).Truncate(time.Millisecond)
}

// deliveryTime is the x-opt-delivery-time of a delayed publish (Unix ms).
func (c *publishConfig) deliveryTime() int64 {
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	return now().Add(c.delay).UnixMilli()
}

// clock is the publish's clock: time.Now unless a test set one.
func (c *publishConfig) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// observePublish reports one publish that started at start (zero: it never
// got to the projection) to the observer, if any.
func (c *publishConfig) observePublish(queue, urn, id string, start time.Time, err error) {
	if c.observer == nil {
		return
	}
	ev := PublishEvent{Queue: queue, URN: urn, MessageID: id, Outcome: publishOutcome(err), Err: err}
	if !start.IsZero() {
		ev.Duration = c.clock().Sub(start)
	}
	defer recoverHook(nil, "publish observer panicked")
	c.observer.Published(ev)
}

// checkPayload is the publish side's check (nil without a validator), and
// the envelope to send: env, or a copy whose data a PayloadProtector
// protected once the check passed; the check ends with ctx.
func (c *publishConfig) checkPayload(ctx context.Context, env *Envelope) (*Envelope, error) {
	if c.payload == nil {
		return env, nil
	}
	if err := checkPayload(ctx, c.payload, env.URN, env.Data); err != nil {
		return nil, err
	}
	return protectPayload(c.payload, env)
}
