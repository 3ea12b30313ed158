// Envelope.Bind's fast path: data read straight into a flat struct of
// strings, numbers and bools, with exactly json.Unmarshal's result, or not
// at all (then json.Unmarshal decodes it).

package artemis

import (
	"encoding"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
)

// bindField is one field a bindPlan fills: its JSON key, the key in ASCII
// upper case (for encoding/json's case-insensitive match), and where and
// how to store a value.
type bindField struct {
	name, folded string
	index        int
	kind         reflect.Kind
	bits         int
}

// bindPlan is how the fast path fills one struct type.
type bindPlan struct {
	fields []bindField
	exact  map[string]int // key -> fields index
	folded map[string]int // key in ASCII upper case -> fields index
}

// bindPlans caches a *bindPlan per struct type, nil for a type the fast
// path leaves to encoding/json.
var bindPlans sync.Map

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonNumberType      = reflect.TypeFor[json.Number]()
)

// planFor returns t's plan, or nil when t is not a struct whose every
// decoded field is a string, a bool, an integer or a float, each with a
// plain name: anything else (an embedded struct, a method that decodes,
// the ",string" option, two names encoding/json could confuse) is left to
// encoding/json, whose rules for them the fast path does not repeat.
func planFor(t reflect.Type) *bindPlan {
	if p, ok := bindPlans.Load(t); ok {
		return p.(*bindPlan)
	}
	p := newBindPlan(t)
	bindPlans.Store(t, p)
	return p
}

func newBindPlan(t reflect.Type) *bindPlan {
	if t.Kind() != reflect.Struct || decodesItself(t) {
		return nil
	}
	p := &bindPlan{exact: map[string]int{}, folded: map[string]int{}}
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return nil
		}
		tag := sf.Tag.Get("json")
		if !sf.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		if !plainKey(name) || hasOption(opts, "string") || decodesItself(sf.Type) || bindKind(sf.Type.Kind()) == 0 ||
			sf.Type == jsonNumberType { // a string encoding/json checks as a number

			return nil
		}
		folded := strings.ToUpper(name)
		if _, dup := p.folded[folded]; dup {
			return nil
		}
		bits := 0
		if k := sf.Type.Kind(); k != reflect.String && k != reflect.Bool {
			bits = sf.Type.Bits()
		}
		p.exact[name], p.folded[folded] = len(p.fields), len(p.fields)
		p.fields = append(p.fields, bindField{name: name, folded: folded, index: i, kind: sf.Type.Kind(), bits: bits})
	}
	return p
}

// decodesItself reports whether encoding/json would hand a value of type t
// to a method of its own.
func decodesItself(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return pt.Implements(jsonUnmarshalerType) || pt.Implements(textUnmarshalerType)
}

// plainKey reports whether name is a key of ASCII letters, digits, '_',
// '-' and '.': one encoding/json takes as a tag name and folds only by
// ASCII case, of at most maxPlainKey bytes.
func plainKey(name string) bool {
	if len(name) > maxPlainKey {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == '.':
		default:
			return false
		}
	}
	return name != ""
}

// maxPlainKey bounds the names a plan takes, so a key is folded on the stack.
const maxPlainKey = 64

func hasOption(opts, want string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == want {
			return true
		}
	}
	return false
}

// bindKind groups the kinds the fast path stores; 0 is one it does not.
func bindKind(k reflect.Kind) reflect.Kind {
	switch k {
	case reflect.String, reflect.Bool, reflect.Float32, reflect.Float64:
		return k
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return reflect.Int
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return reflect.Uint
	}
	return 0
}

// bindStore is one value the fast path will store, read and checked.
type bindStore struct {
	field *bindField
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
	if p == nil {
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
		switch bindKind(w.field.kind) {
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
func (p *bindPlan) field(key string) (*bindField, error) {
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
func readValue(f *bindField, val string, clean bool) (st bindStore, store bool, err error) {
	if val == "null" {
		return st, false, nil
	}
	st.field = f
	switch bindKind(f.kind) {
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
