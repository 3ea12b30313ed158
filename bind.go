// Envelope.Bind's fast path: data read straight into a flat struct of
// strings, numbers and bools, with exactly json.Unmarshal's result, or not
// at all (then json.Unmarshal decodes it).

package artemis

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
)

// bindStore is one value the fast path will store, read and checked.
type bindStore struct {
	field *planField
	str   string
	num   uint64 // an int's bits, a uint, a float's bits, a bool as 0 or 1
}

// bindStoresOnStack is how many stores one Bind keeps on its stack; more
// go to the heap.
const bindStoresOnStack = 16

// bindStruct decodes the JSON object s into *v and returns true when v
// points to a struct with a plan and json.Unmarshal would succeed and
// store exactly the same values; otherwise it stores nothing and returns
// false. It reads the whole object and checks its grammar and UTF-8 before
// it stores anything, so data encoding/json would refuse (or would decode
// with a type error) is never half stored.
func bindStruct(s string, v any) bool {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return false
	}
	p := planFor(rv.Type().Elem())
	if p == nil || !p.bind {
		return false
	}
	start := jsoncodec.SkipSpace(s, 0)
	if start >= len(s) || s[start] != '{' {
		return false
	}
	stores := make([]bindStore, 0, bindStoresOnStack)
	end, err := jsoncodec.WalkObject(s, start, func(_, key, s string, i int) (int, error) {
		end, clean, ok := jsoncodec.ScanValue(s, i, 1)
		if !ok {
			return 0, errNotBound
		}
		f, err := p.field(key)
		if err != nil || f == nil {
			return end, err
		}
		st, store, err := readValue(f, s[i:end], clean)
		if err != nil || !store {
			return end, err
		}
		stores = append(stores, st)
		return end, nil
	})
	if err != nil || jsoncodec.SkipSpace(s, end) != len(s) {
		return false
	}
	st := rv.Elem()
	for _, w := range stores {
		fv := st.Field(w.field.index)
		switch w.field.kind {
		case reflect.String:
			fv.SetString(strings.Clone(w.str))
		case reflect.Bool:
			fv.SetBool(w.num == 1)
		case reflect.Int:
			fv.SetInt(int64(w.num))
		case reflect.Uint:
			fv.SetUint(w.num)
		default:
			fv.SetFloat(math.Float64frombits(w.num))
		}
	}
	return true
}

// errNotBound stops the fast path's walk: encoding/json decodes instead.
var errNotBound = errors.New("data is left to encoding/json")

// field finds key's field as encoding/json does: the exact name first,
// then the name folded by case. A key with a non-ASCII byte and no exact
// match could fold onto a field by Unicode's rules (the Kelvin sign is a
// K): those go to encoding/json.
func (p *structPlan) field(key string) (*planField, error) {
	if i, ok := p.exact[key]; ok {
		return &p.fields[i], nil
	}
	var buf [maxPlainKey]byte
	if len(key) > len(buf) {
		// Longer than any name of the plan: it matches none, unless its
		// non-ASCII runes fold to fewer bytes.
		for i := 0; i < len(key); i++ {
			if key[i] >= 0x80 {
				return nil, errNotBound
			}
		}
		return nil, nil
	}
	up := buf[:len(key)]
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 0x80 {
			return nil, errNotBound
		}
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up[i] = c
	}
	if i, ok := p.folded[string(up)]; ok {
		return &p.fields[i], nil
	}
	return nil, nil
}

// readValue reads val, the JSON value (checked, clean when a string holds
// no escape) of f's key, as json.Unmarshal would store it into f: store is
// false for null, which leaves the field as it was. Any value
// json.Unmarshal would refuse with a type error is errNotBound.
func readValue(f *planField, val string, clean bool) (st bindStore, store bool, err error) {
	if val == "null" {
		return st, false, nil
	}
	st.field = f
	switch f.kind {
	case reflect.String:
		if val[0] != '"' {
			return st, false, errNotBound
		}
		st.str = val[1 : len(val)-1]
		if !clean {
			if st.str, err = jsoncodec.Unquote(val); err != nil {
				return st, false, errNotBound
			}
		}
	case reflect.Bool:
		switch val {
		case "true":
			st.num = 1
		case "false":
		default:
			return st, false, errNotBound
		}
	case reflect.Int:
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || f.bits < 64 && (n < -1<<(f.bits-1) || n > 1<<(f.bits-1)-1) {
			return st, false, errNotBound
		}
		st.num = uint64(n)
	case reflect.Uint:
		n, err := strconv.ParseUint(val, 10, 64)
		if err != nil || f.bits < 64 && n > 1<<f.bits-1 {
			return st, false, errNotBound
		}
		st.num = n
	default: // ParseFloat refuses every JSON value but a number
		x, err := strconv.ParseFloat(val, f.bits)
		if err != nil {
			return st, false, errNotBound
		}
		st.num = math.Float64bits(x)
	}
	return st, true, nil
}
