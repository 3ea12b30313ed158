package jsoncodec

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCheckedPathTexts: the helpers behind the checked path's texts, on
// the inputs the decoder hands them and on the ones it never does (they
// must still say something true).
func TestCheckedPathTexts(t *testing.T) {
	assert.EqualError(t, SyntaxError(`{"a":1}`), "unexpected input", "called on valid JSON")
	assert.ErrorContains(t, SyntaxError(""), "it is empty")
	assert.ErrorContains(t, SyntaxError(" \n"), "it holds only whitespace")
	assert.ErrorContains(t, SyntaxError(`{"a":}`), "at byte 6: invalid character '}'")
	assert.ErrorContains(t, SyntaxError(`{"a":1`), "(the body ends too early)")

	assert.Equal(t, 3, InvalidUTF8At("ab\xffc"))
	assert.Equal(t, 1, InvalidUTF8At("\xc3"), "a truncated sequence")
	assert.Equal(t, 4, InvalidUTF8At("café"[:4]+"!"), "é cut after its first byte")
	assert.Equal(t, 6, InvalidUTF8At("café"), "valid: one past the end")

	for s, want := range map[string]string{
		"": "empty", `[1]`: "an array", `"s"`: "a string", `true`: "true", `false`: "false",
		`null`: "null", `-1`: "a number", `0.5`: "a number",
	} {
		assert.Equal(t, want, Kind(s), "Kind(%q)", s)
	}
}
