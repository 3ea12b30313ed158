// The texts of the envelope decoder's checked path: why a body is not valid
// JSON, where it is not UTF-8, what it is when it is JSON but not an object.

package jsoncodec

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// SyntaxError says where and why s is not valid JSON: "at byte N: "
// and encoding/json's reason. N counts from 1 and is the byte encoding/json
// stopped at, as its SyntaxError.Offset.
func SyntaxError(s string) error {
	var v any
	err := json.Unmarshal(StringBytes(s), &v)
	if err == nil {
		return errors.New("unexpected input")
	}
	if SkipSpace(s, 0) == len(s) {
		if s == "" {
			return fmt.Errorf("it is empty: %w", err)
		}
		return fmt.Errorf("it holds only whitespace: %w", err)
	}
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return err
	}
	// encoding/json stops at 10000 levels with the terse "invalid character
	// '[' exceeded max depth"; say what happened instead.
	if strings.HasSuffix(se.Error(), "exceeded max depth") {
		return fmt.Errorf("at byte %d: arrays and objects are nested more than 10000 levels deep", se.Offset)
	}
	if se.Offset >= int64(len(s)) && strings.HasPrefix(se.Error(), "unexpected end") {
		return fmt.Errorf("at byte %d: %w (the body ends too early)", se.Offset, err)
	}
	return fmt.Errorf("at byte %d: %w", se.Offset, err)
}

// InvalidUTF8At is the position (counting from 1) of the first byte of s
// that is not part of a valid UTF-8 sequence.
func InvalidUTF8At(s string) int {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return i + 1
		}
		i += size
	}
	return len(s) + 1
}

// Kind names the JSON value that starts s, which is valid JSON, for an
// error: "an array", "a string", "a number", "true", "false", "null", or
// "empty" for no value at all.
func Kind(s string) string {
	if s == "" {
		return "empty"
	}
	switch s[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't':
		return "true"
	case 'f':
		return "false"
	case 'n':
		return "null"
	}
	return "a number"
}
