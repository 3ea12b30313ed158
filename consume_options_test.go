package artemis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The options only Client.Consume and Subscribe read land in the
// Consumer's run options, and the defaults are the zero values Consume
// reads as "none" (credit 0: defaultCredit).
func TestConsumeOptionsSetTheRunOptions(t *testing.T) {
	h := Handlers{urnCreated: newHandled().handler(nil)}
	plain, err := NewConsumer(h)
	require.NoError(t, err)
	assert.Equal(t, consumeOptions{}, plain.run, "no option: the defaults")

	c, err := NewConsumer(h, WithCredit(7), WithoutDeadLetter(), WithMaxMessages(3),
		WithStopWhenIdle(2*time.Second), WithSelector("region = 'eu'"), WithOnlyHandledURNs(), WithNonDurable())
	require.NoError(t, err)
	assert.Equal(t, consumeOptions{
		credit:       7,
		selector:     "region = 'eu'",
		onlyHandled:  true,
		noDeadLetter: true,
		maxMessages:  3,
		stopWhenIdle: 2 * time.Second,
		nonDurable:   true,
	}, c.run)
	assert.Equal(t, consumeOptions{}, plain.run, "another Consumer's options are its own")
}
