package artemis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The default schedule rides out a 20s outage with the default maxTries and
// still dead-letters a message that fails for ever within 2 minutes.
func TestTheDefaultRetryScheduleRidesOutAnOutage(t *testing.T) {
	b := DefaultRetryBackoff()
	require.NoError(t, b.Validate())
	for _, random := range []float64{0, 0.5, 0.999999} {
		var total time.Duration
		for attempt := 0; attempt < DefaultMaxTries-1; attempt++ {
			total += b.Delay(attempt, random)
		}
		// The first failure happens in the outage; the last attempt comes
		// at least total later.
		assert.Greater(t, total, 30*time.Second, "random %v", random)
		assert.Less(t, total, 2*time.Minute-10*time.Second, "random %v", random)
	}
	assert.Equal(t, 8*time.Second, b.Delay(0, 1))
	assert.Equal(t, 30*time.Second, b.Delay(1, 0))
	assert.Equal(t, 10*time.Minute, b.Delay(20, 0), "capped")
}

func TestTheDefaultConsumerRetriesByTheDefaultSchedule(t *testing.T) {
	c := mustConsumer(t, Handlers{urnCreated: succeeding})
	require.NotNil(t, c.schedule)
	for range 20 {
		d := c.schedule(0)
		assert.True(t, d >= 8*time.Second && d <= 10*time.Second, "%v", d)
	}
}

func TestWithRetryBackoffIsValidated(t *testing.T) {
	_, err := NewConsumer(Handlers{urnCreated: succeeding}, WithRetryBackoff(Backoff{Initial: time.Second, Max: time.Millisecond, Multiplier: 2}))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "retry backoff")

	c := mustConsumer(t, Handlers{urnCreated: succeeding}, WithRetryBackoff(Backoff{Initial: time.Hour, Max: 6 * time.Hour, Multiplier: 2}))
	assert.Equal(t, 4*time.Hour, c.schedule(2), "a schedule of hours")
}
