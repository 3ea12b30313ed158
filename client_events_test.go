package artemis

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

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
