// The scheduled retry: the next attempt of a failed message published as a
// copy scheduled on its queue, confirmed by the broker before the failed
// delivery is accepted.

package artemis

import (
	"fmt"
	"time"

	"github.com/Azure/go-amqp"
)

// retry settles a failed attempt below maxTries by the schedule: a
// scheduled copy when the wait is positive and there is a retry sender,
// else (and, after the hold, when the copy is not confirmed) modified with
// delivery-failed (the broker redelivers at once).
func (d *delivery) retry(cause error) error {
	delay := d.c.retryWait(d.attempts)
	if delay <= 0 || d.env == nil {
		return d.finish(KindHandlerFailed, cause, DispositionAbandoned, d.abandon)
	}
	now := d.c.now()
	msg := retryCopy(d.env, d.msg, d.attempts+1, now, now.Add(delay), d.retryAddress())
	err := d.writeCopy(d.c.retrySender, msg)
	if err == nil {
		d.delay = delay
		return d.finish(KindHandlerFailed, cause, DispositionScheduled, d.accept)
	}
	retryErr := fmt.Errorf("%w (scheduling a retry after: %w)", err, cause)
	// The attempt failed all the same: after the hold (no hot loop on a
	// broken retry link), an immediate retry, modified with delivery-failed,
	// which Artemis counts and the memory remembers. A plain release would
	// not count it, and a copy the broker never takes (a full queue, no
	// permission to send to it) would then run the handler for ever,
	// never reaching maxTries.
	return d.finish(KindRetryFailed, retryErr, DispositionAbandoned, func() error {
		d.wait(d.c.retryDelay)
		return d.abandon()
	})
}

// retryWait is the schedule's wait after attempt attempts failed; 0 (at
// once) without a schedule or a retry sender. A panic in the schedule is
// not the delivery's loss: it retries at once.
func (c *Consumer) retryWait(attempts int) (wait time.Duration) {
	if c.schedule == nil || c.retrySender == nil {
		return 0
	}
	defer recoverHook(c.logger, "retry schedule panicked") // wait stays 0
	wait = c.schedule(attempts)
	return wait
}

// retryAddress is the address the copy is published to: the receiver's,
// else the queue option.
func (d *delivery) retryAddress() string {
	if a, ok := d.r.(interface{ Address() string }); ok && a.Address() != "" {
		return a.Address()
	}
	return d.c.queue
}

// retryCopy is the next attempt of env: the envelope re-encoded
// canonically with attempts (unknown keys kept, no dead_letter block), the section 2 projection,
// the source's out-of-band headers, group-id, priority and expiry, and the
// scheduled delivery time at (read on this machine's clock: a broker whose
// clock is ahead delivers it that much early). It carries no duplicate id: Artemis drops,
// and answers accepted for, a transfer whose _AMQ_DUPL_ID it has seen, and
// the source's id (or any id derived from the message) is shared by an
// earlier publish or an earlier retry of a redriven message.
func retryCopy(env *Envelope, src *amqp.Message, attempts int, now, at time.Time, addr string) *amqp.Message {
	cp := *env
	cp.Attempts = attempts
	cp.DeadLetter = nil // only ever on a dead-letter queue; a message moved back with it retries without it
	body := cp.appendEncode(make([]byte, 0, cp.encodedSizeHint()))
	msg := projection(&cp, string(body), stringProperties(src))
	keepForRetry(msg, src, now)
	msg.Annotations[AnnotationDeliveryTime] = at.UnixMilli()
	setTo(msg, addr)
	return msg
}

// keepForRetry gives a retry copy the source's group-id and priority, and
// its expiry: the absolute expiry time unchanged (the message expires when
// its producer said, however often it is retried) with the header ttl
// what is left of it now (at least 1ms: a copy due after its expiry
// expires on the broker, as the source would have).
// A source with a header ttl and no absolute expiry time gets the same
// ttl again, as a cluster's move does.
func keepForRetry(msg, src *amqp.Message, now time.Time) {
	keepForDeadLetter(msg, src)
	if src.Properties != nil && src.Properties.AbsoluteExpiryTime != nil && !src.Properties.AbsoluteExpiryTime.IsZero() {
		exp := *src.Properties.AbsoluteExpiryTime
		msg.Properties.AbsoluteExpiryTime = &exp
		msg.Header.TTL = max(exp.Sub(now), time.Millisecond).Truncate(time.Millisecond)
		return
	}
	if src.Header != nil && src.Header.TTL > 0 {
		msg.Header.TTL = src.Header.TTL
	}
}
