package artemis

import (
	"fmt"
	"math"
	"time"
)

// Defaults of Backoff.
const (
	DefaultBackoffInitial    = 100 * time.Millisecond
	DefaultBackoffMax        = 30 * time.Second
	DefaultBackoffMultiplier = 2.0
	DefaultBackoffJitter     = 0.2
)

// Backoff is the capped exponential backoff with jitter that Client.Consume
// waits between attempts to re-attach after a loss. Retry n (0-based) waits
// Initial*Multiplier^n, capped at Max, shortened by up to Jitter of itself
// at random, so clients that lost the same broker do not return in step.
type Backoff struct {
	// Initial is the wait before the first retry. It must be > 0.
	// Default (DefaultBackoff): DefaultBackoffInitial (100ms).
	Initial time.Duration
	// Max caps every wait. It must be >= Initial. An attachment that stays
	// up at least this long resets the sequence to Initial.
	// Default (DefaultBackoff): DefaultBackoffMax (30s).
	Max time.Duration
	// Multiplier grows the wait after each failed attempt. It must be >= 1.
	// Default (DefaultBackoff): 2.
	Multiplier float64
	// Jitter is the largest fraction of a wait removed at random, in [0, 1].
	// 0 makes the waits exact. Default (DefaultBackoff): 0.2.
	Jitter float64
}

// DefaultBackoff returns the backoff Client uses unless told otherwise:
// 100ms, doubling, capped at 30s, with up to 20% jitter.
func DefaultBackoff() Backoff {
	return Backoff{
		Initial:    DefaultBackoffInitial,
		Max:        DefaultBackoffMax,
		Multiplier: DefaultBackoffMultiplier,
		Jitter:     DefaultBackoffJitter,
	}
}

// Validate reports a Backoff that cannot be used, matching ErrInvalidConfig.
func (b Backoff) Validate() error {
	switch {
	case b.Initial <= 0:
		return fmt.Errorf("%w: backoff initial is %v, want > 0", ErrInvalidConfig, b.Initial)
	case b.Max < b.Initial:
		return fmt.Errorf("%w: backoff max %v is below initial %v", ErrInvalidConfig, b.Max, b.Initial)
	case !(b.Multiplier >= 1) || math.IsInf(b.Multiplier, 0):
		return fmt.Errorf("%w: backoff multiplier is %v, want a finite number >= 1", ErrInvalidConfig, b.Multiplier)
	case !(b.Jitter >= 0 && b.Jitter <= 1):
		return fmt.Errorf("%w: backoff jitter is %v, want 0..1", ErrInvalidConfig, b.Jitter)
	}
	return nil
}

// Delay returns the wait before retry number attempt (0 for the first),
// given random, a number in [0, 1) from the caller's random source. The
// result is never above Max and never below (1-Jitter) of the un-jittered
// wait.
func (b Backoff) Delay(attempt int, random float64) time.Duration {
	if attempt < 0 {
		attempt = 0
	}
	base := float64(b.Initial) * math.Pow(b.Multiplier, float64(attempt))
	if math.IsNaN(base) || base > float64(b.Max) {
		base = float64(b.Max)
	}
	random = min(max(random, 0), 1)
	f := base * (1 - b.Jitter*random)
	if f >= float64(b.Max) {
		// Only the cap itself: float64 rounds a Max near the largest
		// Duration up to 2^63, which converts to a negative Duration.
		return b.Max
	}
	d := time.Duration(f)
	return max(d, 0)
}
