// The canonical JSON writer: strings without HTML or slash escaping, and
// the canonical re-encode (compaction) of the raw JSON values a decoded
// envelope keeps: data and unknown values.

package jsoncodec

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// StringBytes returns a copy of s as bytes (nil for "").
func StringBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// ErrNotObject is CanonicalObject's answer for valid JSON that is not an
// object.
var ErrNotObject = errors.New("must be a JSON object")

// MaxDepth is the deepest nesting a JSON document may have to be read:
// encoding/json's own limit, which the decoder's checked path inherits.
const MaxDepth = 10000

// MaxMemberDepth is the deepest a value may nest and still be read as a
// member of a top-level object (an envelope's data): MaxDepth less the
// object around it.
const MaxMemberDepth = MaxDepth - 1

// CheckMemberDepth reports an error when the valid JSON value s nests
// deeper than MaxMemberDepth. A value shorter than two bytes a level over
// the limit (an opening and a closing bracket each) is never scanned.
func CheckMemberDepth(s string) error {
	if len(s) < 2*(MaxMemberDepth+1) {
		return nil
	}
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > deepest {
				deepest = depth
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	if deepest > MaxMemberDepth {
		return fmt.Errorf("is nested more than %d levels deep (%d): in an envelope it would pass the %d levels a decoder reads", MaxMemberDepth, deepest, MaxDepth)
	}
	return nil
}

// CanonicalObject checks that raw is one JSON object (whitespace around it
// allowed) in valid UTF-8, nested no deeper than MaxMemberDepth, and
// returns its canonical form: raw itself when it is canonical already,
// else a fresh copy.
func CanonicalObject(raw []byte) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, ErrNotObject
	}
	s := string(raw)
	start := SkipSpace(s, 0)
	end, clean, ok := ScanValue(s, start, 0)
	if !ok {
		// The scanner stops at MaxScanDepth; encoding/json tells a deep
		// but valid value from a broken one, and says what is broken.
		switch {
		case !utf8.Valid(raw):
			return nil, errors.New("is not valid UTF-8")
		case !json.Valid(raw):
			return nil, fmt.Errorf("is not valid JSON: %w", SyntaxError(s))
		}
		if err := CheckMemberDepth(s); err != nil {
			return nil, err
		}
		end, clean = skipValue(s, start), false
	}
	if SkipSpace(s, end) != len(s) {
		return nil, fmt.Errorf("is not valid JSON: %w", SyntaxError(s))
	}
	if s[start] != '{' {
		return nil, ErrNotObject
	}
	if clean && start == 0 && end == len(s) {
		return raw, nil
	}
	return AppendCanonical(nil, s[start:end]), nil
}

// CanonicalValue returns the canonical text of the valid JSON value val:
// val itself when the scanner found it clean (no whitespace, no escape the
// canonical form does not use), else a rewritten copy.
func CanonicalValue(val string, clean bool) string {
	if clean {
		return val
	}
	b := AppendCanonical(make([]byte, 0, len(val)), val)
	if string(b) == val {
		return val
	}
	return string(b)
}

// AppendCanonical writes the valid JSON value v in canonical form: no
// whitespace between tokens, every string by appendCanonicalString, numbers
// and literals exactly as they came (9007199254740993, 1.0, 1e21 and -0
// stay as they are). v must be valid JSON in valid UTF-8.
func AppendCanonical(b []byte, v string) []byte {
	start := 0
	for i := 0; i < len(v); {
		switch v[i] {
		case ' ', '\t', '\n', '\r':
			b = append(b, v[start:i]...)
			i++
			start = i
		case '"':
			b = append(b, v[start:i]...)
			end := skipString(v, i)
			b = appendCanonicalString(b, v[i:end])
			i, start = end, end
		default:
			i++
		}
	}
	return append(b, v[start:]...)
}

// appendCanonicalString rewrites the quoted JSON string q (valid, as
// scanned) in canonical form: what AppendString writes for the same text.
// \/ becomes /, \u escapes of anything but a control character become the
// character in UTF-8 (a surrogate pair one 4-byte character; a lone
// surrogate, which no UTF-8 text can hold, U+FFFD as encoding/json decodes
// it), and a control character takes its short escape (\b \f \n \r \t) or
// \u00xx in lowercase hex.
func appendCanonicalString(b []byte, q string) []byte {
	body := q[1 : len(q)-1]
	if strings.IndexByte(body, '\\') < 0 {
		return append(b, q...)
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(body); {
		if body[i] != '\\' {
			i++
			continue
		}
		b = append(b, body[start:i]...)
		c := body[i+1]
		i += 2
		var r rune
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
			start = i
			continue
		case '/':
			r = '/'
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			r = hex4(body[i : i+4])
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+6 <= len(body) && body[i] == '\\' && body[i+1] == 'u' {
					r2 = hex4(body[i+2 : i+6])
				}
				if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
					r = pair
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
		}
		b = appendRune(b, r)
		start = i
	}
	b = append(b, body[start:]...)
	return append(b, '"')
}

// canonicalEscapes reports whether every escape in the quoted JSON string q
// is one the canonical form writes: \" \\ \b \f \n \r \t, or \u00xx
// (lowercase hex) for another control character.
func canonicalEscapes(q string) bool {
	for i := 1; i < len(q)-1; i++ {
		if q[i] != '\\' {
			continue
		}
		switch q[i+1] {
		case '"', '\\', 'b', 'f', 'n', 'r', 't':
			i++
			continue
		case 'u':
			h := q[i+2 : i+6]
			if h[0] != '0' || h[1] != '0' || h[2] > '1' || !isLowerHex(h[3]) {
				return false
			}
			switch h[2:] {
			case "08", "09", "0a", "0c", "0d":
				return false
			}
			i += 5
			continue
		}
		return false
	}
	return true
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// appendRune writes one decoded character of a string canonically.
func appendRune(b []byte, r rune) []byte {
	if r >= 0x20 {
		if r == '"' || r == '\\' {
			return append(b, '\\', byte(r))
		}
		return utf8.AppendRune(b, r)
	}
	switch r {
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	}
	return append(b, '\\', 'u', '0', '0', HexDigits[r>>4], HexDigits[r&0xf])
}

func hex4(h string) rune {
	var r rune
	for i := 0; i < 4; i++ {
		c := h[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// HexDigits are the lowercase hex digits the canonical form writes.
var HexDigits = "0123456789abcdef"

// AppendString writes s as a canonical JSON string: only the quote, the
// backslash and control characters are escaped; invalid UTF-8 becomes U+FFFD.
// It copies each run of plain bytes whole (skipPlain finds its end eight
// bytes at a time); a run holding invalid UTF-8 is repaired a rune at a time.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; ; i++ {
		j, nonASCII := skipPlain(s, i)
		if nonASCII && !utf8.ValidString(s[i:j]) {
			b = appendRepaired(append(b, s[start:i]...), s[i:j])
			start = j
		}
		if i = j; i >= len(s) {
			break
		}
		b = append(b, s[start:i]...)
		switch c := s[i]; c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', HexDigits[c>>4], HexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendRepaired appends run, plain bytes that are not valid UTF-8, with
// each byte that starts no valid sequence replaced by U+FFFD. A run ends
// only before an ASCII byte, which no sequence holds, so each rune decodes
// here as it would in the whole string.
func appendRepaired(b []byte, run string) []byte {
	start := 0
	for i := 0; i < len(run); {
		r, size := utf8.DecodeRuneInString(run[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(append(b, run[start:i]...), "\ufffd"...)
			start = i + 1
		}
		i += size
	}
	return append(b, run[start:]...)
}
