// NewEnvelope's fast path: a flat struct of strings, bools and numbers
// written straight in canonical form, byte for byte what json.Marshal and
// the canonical rewrite of its output give, or not at all.

package artemis

import (
	"math"
	"reflect"
	"strconv"

	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
)

// marshalStruct writes data, a struct with a plan or a non-nil pointer to
// one, as the canonical JSON object json.Marshal's output becomes. False
// leaves data to json.Marshal: another type, or a float json.Marshal
// refuses (NaN, an infinity), for its error.
func marshalStruct(data any) ([]byte, bool) { return appendStruct(nil, data) }

// appendStruct is marshalStruct appending to b, which it grows when the
// object may not fit in what b has left (a nil b: an array of the size
// the object may take). The result is only meaningful when true.
func appendStruct(b []byte, data any) ([]byte, bool) {
	rv := reflect.ValueOf(data)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil, false
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return nil, false
	}
	p := planFor(rv.Type())
	if p == nil || !p.marshal {
		return nil, false
	}
	size := 2 // the braces
	for i := range p.fields {
		f := &p.fields[i]
		size += len(f.member) + 1
		if f.kind == reflect.String {
			size += len(rv.Field(f.index).String()) + 2
		} else {
			size += 24 // the longest integer, float or bool
		}
	}
	if cap(b)-len(b) < size {
		b = append(make([]byte, 0, len(b)+size), b...)
	}
	start := len(b)
	b = append(b, '{')
	for i := range p.fields {
		f := &p.fields[i]
		fv := rv.Field(f.index)
		if f.kind == reflect.Float32 || f.kind == reflect.Float64 {
			if x := fv.Float(); math.IsInf(x, 0) || math.IsNaN(x) {
				return nil, false
			}
		}
		// omitempty and omitzero both leave out a zero value here (-0
		// too): encoding/json asks reflect's IsZero for either.
		if f.omitZeroValue && fv.IsZero() {
			continue
		}
		if len(b) > start+1 {
			b = append(b, ',')
		}
		b = append(b, f.member...)
		switch f.kind {
		case reflect.String:
			b = jsoncodec.AppendString(b, fv.String())
		case reflect.Bool:
			b = strconv.AppendBool(b, fv.Bool())
		case reflect.Int:
			b = strconv.AppendInt(b, fv.Int(), 10)
		case reflect.Uint:
			b = strconv.AppendUint(b, fv.Uint(), 10)
		default:
			b = appendNumber(b, fv.Float(), f.bits)
		}
	}
	return append(b, '}'), true
}

// appendNumber writes x, a finite float of the given bits, as
// encoding/json does, the way ECMAScript prints a number: the shortest
// decimal that reads back as x, in plain notation from 1e-6 up to 1e21
// and in exponent notation outside it, the exponent without a leading
// zero (1e-7, not 1e-07).
func appendNumber(b []byte, x float64, bits int) []byte {
	a, exp := math.Abs(x), false
	if bits == 32 {
		exp = a != 0 && (float32(a) < 1e-6 || float32(a) >= 1e21)
	} else {
		exp = a != 0 && (a < 1e-6 || a >= 1e21)
	}
	if !exp {
		return strconv.AppendFloat(b, x, 'f', -1, bits)
	}
	b = strconv.AppendFloat(b, x, 'e', -1, bits)
	if n := len(b); b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // e-07 -> e-7
		b = b[:n-1]
	}
	return b
}
