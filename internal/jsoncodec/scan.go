// The one-pass JSON scanner the envelope decoder walks with. It is the only
// file that knows JSON grammar.

package jsoncodec

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// EachMember walks the members of the JSON object starting at s[start],
// which the caller has already checked to be valid JSON (so nesting deeper
// than the fast path's limit is fine: values are skipped, not scanned). It
// passes each key raw (quoted), unquoted, and the raw value text, which it
// has not checked for canonical form (clean is false).
func EachMember(s string, start int, fn func(qkey, key, val string, clean bool) error) error {
	_, err := WalkObject(s, start, func(qkey, key, s string, i int) (int, error) {
		end := skipValue(s, i)
		return end, fn(qkey, key, s[i:end], false)
	})
	return err
}

// errScan is the fast path's only syntax error: the body is not valid JSON
// or not valid UTF-8. the envelope decoder's checked path then finds out which, and says so.
var errScan = errors.New("invalid JSON")

// MaxScanDepth bounds nesting on the fast path; it is below encoding/json's
// own limit, so a deeper body simply takes the checked path.
const MaxScanDepth = 1000

// WalkObject checks the JSON object starting at s[i] (a '{') for JSON syntax
// and UTF-8 as it walks it. For each member it calls fn with the raw
// (quoted) key, the unquoted key, and s with the index where the value
// starts; fn checks the value (ScanMember does, for a plain one) and returns
// the index just past it. WalkObject returns the index just past the object.
func WalkObject(s string, i int, fn func(qkey, key, s string, i int) (int, error)) (int, error) {
	i = SkipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return 0, errScan
		}
		kEnd, escaped, ok := scanString(s, i)
		if !ok {
			return 0, errScan
		}
		qkey := s[i:kEnd]
		key := qkey[1 : len(qkey)-1]
		if escaped {
			var err error
			if key, err = Unquote(qkey); err != nil {
				return 0, err
			}
		}
		i = SkipSpace(s, kEnd)
		if i >= len(s) || s[i] != ':' {
			return 0, errScan
		}
		vEnd, err := fn(qkey, key, s, SkipSpace(s, i+1))
		if err != nil {
			return 0, err
		}
		i = SkipSpace(s, vEnd)
		if i >= len(s) {
			return 0, errScan
		}
		switch s[i] {
		case ',':
			i = SkipSpace(s, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, errScan
		}
	}
}

// ScanMember checks the value starting at s[i], inside depth open objects,
// and hands its raw text to member, with whether it is canonical already.
func ScanMember(qkey, key, s string, i, depth int, member func(qkey, key, val string, clean bool) error) (int, error) {
	end, clean, ok := ScanValue(s, i, depth)
	if !ok {
		return 0, errScan
	}
	return end, member(qkey, key, s[i:end], clean)
}

// ScanValue returns the index just past the JSON value starting at s[i],
// inside depth open objects and arrays, and false when it is not valid JSON
// or its strings are not valid UTF-8. Only what follows a value (a comma, a
// closing bracket, the end) is left to the caller. clean reports that the
// value is in canonical form already (no whitespace between its tokens, no
// escape the canonical form does not write), so it needs no rewrite. A
// string on its own is clean only when it holds no escape at all: its value
// is then the text between its quotes, so the decoder reads it without
// looking for escapes again (one with canonical escapes, rare, is rewritten
// by CanonicalValue to the same bytes).
func ScanValue(s string, i, depth int) (end int, clean, ok bool) {
	if i >= len(s) {
		return 0, false, false
	}
	switch c := s[i]; c {
	case '"':
		end, escaped, ok := scanString(s, i)
		if !ok {
			return 0, false, false
		}
		return end, !escaped, true
	case '{', '[':
		if depth >= MaxScanDepth {
			return 0, false, false
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		clean = true
		j := SkipSpace(s, i+1)
		if j != i+1 {
			clean = false
		}
		i = j
		if i < len(s) && s[i] == closing {
			return i + 1, clean, true
		}
		for {
			if c == '{' {
				if i >= len(s) || s[i] != '"' {
					return 0, false, false
				}
				end, escaped, ok := scanString(s, i)
				if !ok {
					return 0, false, false
				}
				if escaped && !canonicalEscapes(s[i:end]) {
					clean = false
				}
				i = SkipSpace(s, end)
				if i >= len(s) || s[i] != ':' {
					return 0, false, false
				}
				j := SkipSpace(s, i+1)
				if i != end || j != i+1 {
					clean = false
				}
				i = j
			}
			end, vclean, ok := ScanValue(s, i, depth+1)
			if !ok {
				return 0, false, false
			}
			i = SkipSpace(s, end)
			if !vclean || i != end {
				clean = false
			}
			switch {
			case i >= len(s):
				return 0, false, false
			case s[i] == closing:
				return i + 1, clean, true
			case s[i] != ',':
				return 0, false, false
			}
			j := SkipSpace(s, i+1)
			if j != i+1 {
				clean = false
			}
			i = j
		}
	case 't':
		end, ok := scanLiteral(s, i, "true")
		return end, true, ok
	case 'f':
		end, ok := scanLiteral(s, i, "false")
		return end, true, ok
	case 'n':
		end, ok := scanLiteral(s, i, "null")
		return end, true, ok
	}
	end, ok = scanNumber(s, i)
	return end, true, ok
}

func scanLiteral(s string, i int, lit string) (int, bool) {
	if len(s)-i < len(lit) || s[i:i+len(lit)] != lit {
		return 0, false
	}
	return i + len(lit), true
}

// scanNumber checks JSON number syntax: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(s string, i int) (int, bool) {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i >= len(s):
		return 0, false
	case s[i] == '0':
		i++
	case s[i] >= '1' && s[i] <= '9':
		i = skipDigits(s, i+1)
	default:
		return 0, false
	}
	if i < len(s) && s[i] == '.' {
		j := skipDigits(s, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := skipDigits(s, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func skipDigits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// plainByte marks the bytes a JSON string holds as they are: everything but
// the quote, the backslash and the control characters. Bytes of multi-byte
// UTF-8 sequences are plain here; scanString checks their encoding once per
// string.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString checks the JSON string starting at s[i] (a quote): valid
// escapes, no control characters, valid UTF-8. It returns the index just
// past the closing quote and whether the string holds an escape.
//
// Escapes are ASCII and a multi-byte UTF-8 sequence holds no ASCII byte, so
// the string is valid UTF-8 exactly when its whole content is: one
// utf8.ValidString at the closing quote, run only when a non-ASCII byte was
// seen, checks what decoding each rune in turn would.
func scanString(s string, i int) (end int, escaped, ok bool) {
	j := i + 1
	nonASCII := false
	for {
		var high bool
		j, high = skipPlain(s, j)
		nonASCII = nonASCII || high
		if j >= len(s) {
			return 0, false, false
		}
		switch s[j] {
		case '"':
			if nonASCII && !utf8.ValidString(s[i+1:j]) {
				return 0, false, false
			}
			return j + 1, escaped, true
		case '\\':
			escaped = true
			if j+1 >= len(s) {
				return 0, false, false
			}
			switch s[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(s) || !isHex4(s[j+2:j+6]) {
					return 0, false, false
				}
				j += 6
			default:
				return 0, false, false
			}
		default: // a control character
			return 0, false, false
		}
	}
}

// skipPlain returns the index of the first byte at or after s[j] that is
// not plain (a quote, a backslash or a control character), or len(s), and
// whether it passed a non-ASCII byte. It tests eight bytes at a time while
// it can: in the word, a byte below 0x20 is flagged by (x-0x20)&^x, a quote
// or a backslash by the same zero-byte test on x^'"' or x^'\\'. A borrow
// can also flag bytes above a flagged one, never below it, so the lowest
// flag is the first byte that is not plain. The last few bytes, fewer than
// eight, go a byte at a time.
func skipPlain(s string, j int) (int, bool) {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	var seen uint64
	for ; j+8 <= len(s); j += 8 {
		w := s[j : j+8]
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		q, b := x^('"'*ones), x^('\\'*ones)
		if stop := ((x-0x20*ones)&^x | (q-ones)&^q | (b-ones)&^b) & high; stop != 0 {
			n := bits.TrailingZeros64(stop) &^ 7 // bits below the first stopping byte
			seen |= x & (1<<n - 1)
			return j + n/8, seen&high != 0
		}
		seen |= x
	}
	for j < len(s) && plainByte[s[j]] {
		seen |= uint64(s[j])
		j++
	}
	return j, seen&high != 0
}

func isHex4(h string) bool {
	for i := 0; i < 4; i++ {
		c := h[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// SkipSpace returns the index of the first byte at or after s[i] that is not
// JSON whitespace, or len(s).
func SkipSpace(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the JSON string starting at s[i].
func skipString(s string, i int) int {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(s)
}

// skipValue returns the index just past the JSON value starting at s[i].
func skipValue(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case '"':
				j = skipString(s, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(s)
	default:
		j := i
		for j < len(s) {
			switch s[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return j
			}
			j++
		}
		return j
	}
}

// Unquote returns the text of the quoted JSON string q (valid, as scanned),
// without copying when it holds no escape.
func Unquote(q string) (string, error) {
	if len(q) < 2 || q[0] != '"' {
		return "", fmt.Errorf("not a JSON string: %s", truncate(q))
	}
	body := q[1 : len(q)-1]
	if strings.IndexByte(body, '\\') < 0 {
		return body, nil
	}
	var out string
	if err := json.Unmarshal(StringBytes(q), &out); err != nil {
		return "", err
	}
	return out, nil
}

// IsObject reports whether raw, past leading JSON whitespace, starts an
// object; it does not check the rest.
func IsObject(raw []byte) bool {
	i := 0
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i < len(raw) && raw[i] == '{'
}

// truncate shortens s for an error message.
func truncate(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut-- // not inside a multi-byte sequence
	}
	return s[:cut] + "..."
}
