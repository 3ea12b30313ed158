package artemis

import (
	"context"
	"log/slog"
	"testing"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEventCallbackPanicIsContained(t *testing.T) {
	fb := newFakeBroker(t)
	var buf fakelink.LogBuffer
	c, err := newClient([]string{"amqp://babel:" + secret + "@live:5672"}, &ClientOptions{
		OnEvent: func(ev ConnectionEvent) { panic("callback saw " + ev.URL + " " + secret) },
		Logger:  slog.New(slog.NewTextHandler(&buf, nil)),
	}, fb.dial)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.connection(context.Background())
	require.NoError(t, err)
	assert.Contains(t, buf.String(), "callback panicked")
	assert.NotContains(t, buf.String(), secret)
}

func TestEventKindNames(t *testing.T) {
	seen := map[string]bool{}
	for k := EventConnected; k <= EventPublishRetried; k++ {
		name := k.String()
		assert.NotContains(t, name, "ConnectionEventKind")
		assert.False(t, seen[name], "duplicate name %s", name)
		seen[name] = true
	}
	assert.Equal(t, "ConnectionEventKind(99)", ConnectionEventKind(99).String())
}
