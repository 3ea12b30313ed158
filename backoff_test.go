package artemis

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBackoffDelayGrowsAndCaps(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2}
	want := []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 2 * time.Second, 2 * time.Second,
	}
	for attempt, w := range want {
		assert.Equal(t, w, b.Delay(attempt, 0.99), "attempt %d (no jitter: random is ignored)", attempt)
	}
	assert.Equal(t, 2*time.Second, b.Delay(10_000, 0), "no overflow however many attempts")
	assert.Equal(t, 100*time.Millisecond, b.Delay(-3, 0), "a negative attempt is the first")
}

// A cap at the largest Duration ("no cap", e.g. a retry schedule of
// hours that may grow without bound): float64 rounds it up to 2^63, which
// does not convert back to a Duration; the wait must stay the cap, not
// wrap to a negative number and come out as 0 (an immediate retry).
func TestBackoffDelayAtTheLargestCap(t *testing.T) {
	for _, jitter := range []float64{0, 0.2} {
		b := Backoff{Initial: time.Hour, Max: time.Duration(math.MaxInt64), Multiplier: 2, Jitter: jitter}
		for _, attempt := range []int{3, 40, 62, 63, 64, 100, math.MaxInt} {
			for _, random := range []float64{0, 0.5, 0.999} {
				d := b.Delay(attempt, random)
				want := min(float64(time.Hour)*math.Pow(2, float64(attempt)), float64(b.Max))
				assert.LessOrEqual(t, float64(d), want, "attempt %d jitter %v random %v", attempt, jitter, random)
				assert.GreaterOrEqual(t, float64(d), want*(1-jitter*random)*0.999999,
					"attempt %d jitter %v random %v: %v", attempt, jitter, random, d)
			}
		}
	}
}

func TestBackoffJitter(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 8 * time.Second, Multiplier: 2, Jitter: 0.25}
	cases := []struct {
		attempt int
		random  float64
		want    time.Duration
	}{
		{0, 0, time.Second},
		{0, 0.5, 875 * time.Millisecond},
		{0, 1, 750 * time.Millisecond},
		{2, 0.5, 3500 * time.Millisecond},
		{5, 0, 8 * time.Second}, // capped, then jittered: never above Max
		{5, 0.5, 7 * time.Second},
		{0, -1, time.Second}, // out-of-range randoms are clamped
		{0, 2, 750 * time.Millisecond},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, b.Delay(tc.attempt, tc.random), "attempt %d random %v", tc.attempt, tc.random)
	}
}

func TestBackoffMultiplierOneIsConstant(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 1}
	for attempt := range 5 {
		assert.Equal(t, time.Second, b.Delay(attempt, 0))
	}
}

func TestBackoffValidate(t *testing.T) {
	assert.NoError(t, DefaultBackoff().Validate())
	assert.Equal(t, Backoff{Initial: 100 * time.Millisecond, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2}, DefaultBackoff())
	bad := map[string]Backoff{
		"zero initial":         {Max: time.Second, Multiplier: 2},
		"max below initial":    {Initial: time.Second, Max: time.Millisecond, Multiplier: 2},
		"multiplier below one": {Initial: time.Second, Max: time.Second, Multiplier: 0.5},
		"NaN multiplier":       {Initial: time.Second, Max: time.Second, Multiplier: math.NaN()},
		"infinite multiplier":  {Initial: time.Second, Max: time.Second, Multiplier: math.Inf(1)},
		"negative jitter":      {Initial: time.Second, Max: time.Second, Multiplier: 2, Jitter: -0.1},
		"jitter above one":     {Initial: time.Second, Max: time.Second, Multiplier: 2, Jitter: 1.5},
		"NaN jitter":           {Initial: time.Second, Max: time.Second, Multiplier: 2, Jitter: math.NaN()},
	}
	for name, b := range bad {
		assert.ErrorIs(t, b.Validate(), ErrInvalidConfig, name)
	}
}
