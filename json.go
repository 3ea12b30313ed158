// The canonical JSON writer: strings without HTML or slash escaping, the
// publish-side data marshal and the raw fields written back as they came.

package artemis

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
	"unsafe"
)

func appendRawFields(b []byte, fields []rawField) []byte {
	for _, f := range fields {
		b = append(b, ',')
		b = append(b, f.key...)
		b = append(b, ':')
		b = append(b, f.value...)
	}
	return b
}

func truncate(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// stringBytes views s as bytes for read-only use, without copying.
func stringBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// marshalData turns the publish-side data into the raw JSON of an object.
func marshalData(data any) (json.RawMessage, error) {
	switch d := data.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		return rawObject(d)
	case *json.RawMessage:
		if d == nil {
			return json.RawMessage("{}"), nil
		}
		return rawObject(*d)
	}
	b, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("%w: data: %w", ErrInvalidEnvelope, err)
	}
	if string(b) == "null" {
		// A nil map or a nil pointer: no payload, as an untyped nil is.
		return json.RawMessage("{}"), nil
	}
	if !isJSONObject(b) {
		return nil, fmt.Errorf("%w: data must encode to a JSON object, got %s", ErrInvalidEnvelope, truncate(string(b)))
	}
	return unescapeMarshal(b), nil
}

func rawObject(d json.RawMessage) (json.RawMessage, error) {
	if !json.Valid(d) {
		return nil, fmt.Errorf("%w: data is not valid JSON", ErrInvalidEnvelope)
	}
	if !utf8.Valid(d) {
		return nil, fmt.Errorf("%w: data is not valid UTF-8", ErrInvalidEnvelope)
	}
	if !isJSONObject(d) {
		return nil, fmt.Errorf("%w: data must be a JSON object", ErrInvalidEnvelope)
	}
	var buf bytes.Buffer
	buf.Grow(len(d))
	if err := json.Compact(&buf, d); err != nil {
		return nil, fmt.Errorf("%w: data: %w", ErrInvalidEnvelope, err)
	}
	return buf.Bytes(), nil
}

// unescapeMarshal undoes the escapes encoding/json adds that the canonical
// encoding forbids: \u003c \u003e \u0026 (HTML) and \u2028 \u2029. It works in
// place and only touches escapes that are not themselves escaped.
func unescapeMarshal(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u`)) {
		return b
	}
	out := b[:0]
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' || i+1 >= len(b) {
			out = append(out, c)
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			if r, ok := forbiddenEscape(b[i+2 : i+6]); ok {
				out = utf8.AppendRune(out, r)
				i += 5
				continue
			}
		}
		out = append(out, c, b[i+1])
		i++
	}
	return out
}

func forbiddenEscape(hex []byte) (rune, bool) {
	switch string(hex) {
	case "003c":
		return '<', true
	case "003e":
		return '>', true
	case "0026":
		return '&', true
	case "2028":
		return '\u2028', true
	case "2029":
		return '\u2029', true
	}
	return 0, false
}

var hexDigits = "0123456789abcdef"

// appendString writes s as a canonical JSON string: only the quote, the
// backslash and control characters are escaped; invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
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
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\ufffd"...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
