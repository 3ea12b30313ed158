// The retry schedule: how long a message whose handler failed waits before
// its next attempt.

package artemis

import (
	"math/rand/v2"
	"time"
)

// Defaults of the retry schedule (DefaultRetryBackoff).
const (
	DefaultRetryInitial    = 10 * time.Second
	DefaultRetryMax        = 10 * time.Minute
	DefaultRetryMultiplier = 3.0
	DefaultRetryJitter     = 0.2
)

// RetrySchedule gives the wait before the next attempt of a message whose
// handler just failed on its attempt number attempts (0-based, the
// reconciled attempts the handler saw). A wait of 0 or less retries at
// once: the delivery is modified with delivery-failed and the broker
// redelivers it (and counts it). A positive wait is a scheduled copy of the
// message, confirmed by the broker before the failed delivery is accepted
// (docs/consuming.md). It is called on the worker that ran the handler and
// must not block.
type RetrySchedule func(attempts int) time.Duration

// DefaultRetryBackoff is the schedule a Consumer retries by unless told
// otherwise: 10s, then times 3 per attempt, capped at 10m, each wait
// shortened by up to 20% at random. With the default maxTries (3) a
// failing message waits 8 to 10s, then 24 to 30s, and is dead-lettered on
// its third failure: a dependency down for up to 32s costs no message,
// and one that fails for ever reaches <queue>.dlq about 40s after its
// first attempt.
func DefaultRetryBackoff() Backoff {
	return Backoff{
		Initial:    DefaultRetryInitial,
		Max:        DefaultRetryMax,
		Multiplier: DefaultRetryMultiplier,
		Jitter:     DefaultRetryJitter,
	}
}

// backoffSchedule is the schedule of a validated Backoff: retry n waits
// b.Delay(n, a random number).
func backoffSchedule(b Backoff) RetrySchedule {
	return func(attempts int) time.Duration { return b.Delay(attempts, rand.Float64()) }
}
