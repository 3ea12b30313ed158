package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeJSON turns data into the values the validator reads: map[string]any,
// []any, string, json.Number (numbers kept exact), bool and nil, as
// jsonschema.UnmarshalJSON does (a later duplicate key wins, invalid UTF-8
// becomes U+FFFD), in one pass over the bytes and without its reader and
// buffer: the decode is most of what the check costs on small payloads.
// Anything but exactly one JSON value, with optional whitespace around it,
// is an error.
func decodeJSON(data []byte) (any, error) {
	p := parser{b: data}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.b) {
		return nil, p.errorf("data after the JSON value")
	}
	return v, nil
}

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

type parser struct {
	b []byte
	i int
}

var errEnd = errors.New("unexpected end of JSON input")

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (any, error) {
	if p.i >= len(p.b) {
		return nil, errEnd
	}
	if depth > maxDepth {
		return nil, p.errorf("nested too deep")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, p.errorf("invalid character %q looking for a value", p.b[p.i])
}

func (p *parser) literal(lit string) error {
	if len(p.b)-p.i < len(lit) || string(p.b[p.i:p.i+len(lit)]) != lit {
		return p.errorf("invalid literal, want %s", lit)
	}
	p.i += len(lit)
	return nil
}

func (p *parser) object(depth int) (any, error) {
	p.i++ // {
	m := make(map[string]any)
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return m, nil
	}
	for {
		if p.i >= len(p.b) {
			return nil, errEnd
		}
		if p.b[p.i] != '"' {
			return nil, p.errorf("invalid character %q looking for an object key", p.b[p.i])
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.b) {
			return nil, errEnd
		}
		if p.b[p.i] != ':' {
			return nil, p.errorf("invalid character %q after an object key", p.b[p.i])
		}
		p.i++
		p.space()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[k] = v
		last, err := p.after('}', "an object value")
		if err != nil {
			return nil, err
		}
		if last {
			return m, nil
		}
	}
}

func (p *parser) array(depth int) (any, error) {
	p.i++ // [
	a := []any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return a, nil
	}
	for {
		p.space()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		last, err := p.after(']', "an array element")
		if err != nil {
			return nil, err
		}
		if last {
			return a, nil
		}
	}
}

// after reads what follows an object value or an array element (what): a
// comma, and the blanks after it, when more follow (last false), or end
// when it was the last.
func (p *parser) after(end byte, what string) (last bool, err error) {
	p.space()
	if p.i >= len(p.b) {
		return false, errEnd
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		p.space()
		return false, nil
	case end:
		p.i++
		return true, nil
	}
	return false, p.errorf("invalid character %q after %s", p.b[p.i], what)
}

// number checks the JSON number grammar and keeps the literal.
func (p *parser) number() (any, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i >= len(p.b):
		return nil, errEnd
	case p.b[p.i] == '0':
		p.i++
	case p.b[p.i] >= '1' && p.b[p.i] <= '9':
		p.digits()
	default:
		return nil, p.errorf("invalid character %q in a number", p.b[p.i])
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if !p.digits() {
			return nil, p.errorf("no digit after the decimal point")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if !p.digits() {
			return nil, p.errorf("no digit in the exponent")
		}
	}
	return json.Number(p.b[start:p.i]), nil
}

func (p *parser) digits() bool {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

// str reads a string at p.i (the opening quote).
func (p *parser) str() (string, error) {
	p.i++
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := string(p.b[start:p.i])
			p.i++
			return s, nil
		case c == '\\' || c >= utf8.RuneSelf:
			return p.strSlow(start)
		case c < 0x20:
			return "", p.errorf("control character %q in a string", c)
		}
		p.i++
	}
	return "", errEnd
}

// strSlow reads the rest of a string that has escapes or non-ASCII bytes.
func (p *parser) strSlow(start int) (string, error) {
	out := make([]byte, 0, p.i-start+16)
	out = append(out, p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c < 0x20:
			return "", p.errorf("control character %q in a string", c)
		case c == '\\':
			p.i++
			if p.i >= len(p.b) {
				return "", errEnd
			}
			e := p.b[p.i]
			p.i++
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.errorf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
						save := p.i
						p.i += 2
						var ok2 bool
						if r2, ok2 = p.hex4(); !ok2 {
							return "", p.errorf("invalid \\u escape")
						}
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							r = dec
							r2 = -2 // used
						} else {
							p.i = save // the second escape is a character of its own
						}
					}
					if r2 != -2 {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", p.errorf("invalid escape \\%c", e)
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, p.b[p.i:p.i+size]...)
			}
			p.i += size
		}
	}
	return "", errEnd
}

func (p *parser) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}

func jsonEncode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
