package artemis

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// stringView shares b's memory: no copy, no allocation, and an empty or nil
// slice is "".
func TestStringView(t *testing.T) {
	b := []byte(`{"job":"urn:x"}`)
	s := stringView(b)
	assert.Equal(t, `{"job":"urn:x"}`, s)
	b[2] = 'J'
	assert.Equal(t, `{"Job":"urn:x"}`, s, "the string is a view of b, not a copy")
	assert.Empty(t, stringView(nil))
	assert.Empty(t, stringView([]byte{}))
	assert.Zero(t, testing.AllocsPerRun(100, func() { benchSinkID = stringView(b) }))
}
