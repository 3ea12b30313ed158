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
// is an error, and so is a value beyond one of the check's bounds (a
// *boundError, naming where). When done closes, the decode stops within a
// few thousand values with errStopped.
func decodeJSON(data []byte, done <-chan struct{}) (any, error) {
	p := parser{b: data, done: done}
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

// The check's bounds on a data object. The validator turns every number
// into a math/big rational, whose cost grows with the literal's digits and
// with its exponent (1e999999 is a million-digit integer), and an error
// deep in nested data carries its whole path at every level above it: a
// few bytes of either would cost seconds. Within these bounds a data
// object costs at most a small multiple of an ordinary one of its size
// (BenchmarkHostile measures it); beyond them it is refused before the
// validator sees it.
const (
	// maxDepth is the most objects and arrays a value may be inside of:
	// the data object's members are inside one.
	maxDepth = 32
	// maxNumberDigits is the most digits a number may have, those before
	// and after the decimal point together.
	maxNumberDigits = 400
	// maxNumberExponent bounds the exponent written after e or E, either
	// way: a float64 needs 308 up and 324 down.
	maxNumberExponent = 400
)

// boundError is a value beyond one of the check's bounds.
type boundError struct {
	// path is where, from the value up to the data object while the error
	// travels up the parse; reversed by pointer.
	path []string
	msg  string
}

func (e *boundError) Error() string { return e.pointer() + ": " + e.msg }

// pointer is the JSON pointer of the value.
func (e *boundError) pointer() string {
	loc := make([]string, len(e.path))
	for i, tok := range e.path {
		loc[len(loc)-1-i] = tok
	}
	return pointer(loc)
}

// within adds the member or index tok above a *boundError from a value
// inside it; other errors go up as they are.
func within(err error, tok string) error {
	if be, ok := err.(*boundError); ok {
		be.path = append(be.path, tok)
	}
	return err
}

type parser struct {
	b    []byte
	i    int
	done <-chan struct{} // nil: never stops
	n    int             // values read, for the look at done
}

var (
	errEnd     = errors.New("unexpected end of JSON input")
	errStopped = errors.New("decode stopped: the context ended")
)

// stopEvery is how many values the decode reads between two looks at done.
const stopEvery = 1024

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
	if p.n++; p.n%stopEvery == 0 && p.done != nil {
		select {
		case <-p.done:
			return nil, errStopped
		default:
		}
	}
	if depth > maxDepth {
		return nil, &boundError{msg: fmt.Sprintf("is nested deeper than the payload check's bound (%d objects or arrays)", maxDepth)}
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
			return nil, within(err, k)
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
			return nil, within(err, strconv.Itoa(len(a)))
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

// number checks the JSON number grammar and the check's bounds, and keeps
// the literal.
func (p *parser) number() (any, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	n := 0 // digits before and after the point
	switch {
	case p.i >= len(p.b):
		return nil, errEnd
	case p.b[p.i] == '0':
		p.i++
		n = 1
	case p.b[p.i] >= '1' && p.b[p.i] <= '9':
		n = p.digits()
	default:
		return nil, p.errorf("invalid character %q in a number", p.b[p.i])
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		f := p.digits()
		if f == 0 {
			return nil, p.errorf("no digit after the decimal point")
		}
		n += f
	}
	exp := 0
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		from := p.i
		if p.digits() == 0 {
			return nil, p.errorf("no digit in the exponent")
		}
		exp = exponent(p.b[from:p.i])
	}
	if n > maxNumberDigits {
		return nil, &boundError{msg: fmt.Sprintf("is a number of more digits than the payload check's bound (%d)", maxNumberDigits)}
	}
	if exp > maxNumberExponent {
		return nil, &boundError{msg: fmt.Sprintf("is a number whose exponent is beyond the payload check's bound (e+%d or e-%d)", maxNumberExponent, maxNumberExponent)}
	}
	return json.Number(p.b[start:p.i]), nil
}

// exponent is the magnitude of an exponent's digits, or more than
// maxNumberExponent when it is beyond it (however many digits it has).
func exponent(digits []byte) int {
	e := 0
	for _, c := range digits {
		e = e*10 + int(c-'0')
		if e > maxNumberExponent {
			return maxNumberExponent + 1
		}
	}
	return e
}

// digits skips the digits at p.i and says how many there were.
func (p *parser) digits() int {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i - start
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
