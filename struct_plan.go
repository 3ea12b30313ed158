// The plan of a flat struct of strings, bools and numbers, by which Bind
// reads data into it and NewEnvelope writes it, each as encoding/json
// would; a struct of any other shape is left to encoding/json.

package artemis

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
)

// planField is one field of a structPlan: its JSON key, the key in ASCII
// upper case (for encoding/json's case-insensitive match), where it sits
// and how it is stored.
type planField struct {
	name, folded string
	member       string // `"name":`, as the encoder writes it
	index        int
	kind         reflect.Kind // bindKind's group
	bits         int          // of an integer or a float
	// omitZeroValue: omitempty or omitzero, which leave a zero value out
	omitZeroValue bool
}

// structPlan is how the fast paths read and write one struct type.
type structPlan struct {
	fields []planField
	exact  map[string]int // key -> fields index
	folded map[string]int // key in ASCII upper case -> fields index
	// bind: no method decodes the struct or a field (Bind may fill it);
	// marshal: none encodes one, nor decides a field's omitzero (NewEnvelope
	// may write it).
	bind, marshal bool
}

// structPlans caches a *structPlan per type, nil for a type both fast paths
// leave to encoding/json.
var structPlans sync.Map

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonMarshalerType   = reflect.TypeFor[json.Marshaler]()
	textMarshalerType   = reflect.TypeFor[encoding.TextMarshaler]()
	jsonNumberType      = reflect.TypeFor[json.Number]()
)

// planFor returns t's plan, or nil when t is not a struct whose every
// field encoding/json sees is a string, a bool, an integer or a float,
// each with a plain name and no tag option but omitempty and omitzero:
// anything else (an embedded struct, the ",string" option, an option of
// encoding/json's second version, json.Number, two names encoding/json
// could confuse) is left to encoding/json, whose rules for them the fast
// paths do not repeat.
func planFor(t reflect.Type) *structPlan {
	if p, ok := structPlans.Load(t); ok {
		return p.(*structPlan)
	}
	p := newStructPlan(t)
	structPlans.Store(t, p)
	return p
}

func newStructPlan(t reflect.Type) *structPlan {
	if t.Kind() != reflect.Struct {
		return nil
	}
	p := &structPlan{exact: map[string]int{}, folded: map[string]int{},
		bind: !decodesItself(t), marshal: !encodesItself(t)}
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
		kind := bindKind(sf.Type.Kind())
		if !plainKey(name) || !plainOptions(opts) || kind == 0 ||
			sf.Type == jsonNumberType { // a string encoding/json reads and writes as a number
			return nil
		}
		folded := strings.ToUpper(name)
		if _, dup := p.folded[folded]; dup {
			return nil
		}
		omitZero := hasOption(opts, "omitzero")
		f := planField{name: name, folded: folded, member: `"` + name + `":`, index: i, kind: kind,
			omitZeroValue: omitZero || hasOption(opts, "omitempty")}
		if kind != reflect.String && kind != reflect.Bool {
			f.bits = sf.Type.Bits()
		}
		p.bind = p.bind && !decodesItself(sf.Type)
		p.marshal = p.marshal && !encodesItself(sf.Type) && (!omitZero || !hasIsZero(sf.Type))
		p.exact[name], p.folded[folded] = len(p.fields), len(p.fields)
		p.fields = append(p.fields, f)
	}
	return p
}

// decodesItself reports whether encoding/json would hand a value of type t
// to a method of its own to decode. Built with GOEXPERIMENT=jsonv2, it also
// asks UnmarshalJSONFrom, whose argument type is not importable otherwise:
// that one goes by its name.
func decodesItself(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return pt.Implements(jsonUnmarshalerType) || pt.Implements(textUnmarshalerType) ||
		hasMethod(pt, "UnmarshalJSONFrom")
}

// encodesItself reports whether encoding/json would hand a value of type t
// (or its address) to a method of its own to encode: with GOEXPERIMENT=jsonv2
// also MarshalJSONTo or AppendText, taken by name.
func encodesItself(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return pt.Implements(jsonMarshalerType) || pt.Implements(textMarshalerType) ||
		hasMethod(pt, "MarshalJSONTo") || hasMethod(pt, "AppendText")
}

// hasMethod reports whether t's method set has a method of that name.
func hasMethod(t reflect.Type, name string) bool {
	_, ok := t.MethodByName(name)
	return ok
}

// hasIsZero reports whether t or *t has an IsZero method, which
// encoding/json's omitzero would ask.
func hasIsZero(t reflect.Type) bool {
	return hasMethod(reflect.PointerTo(t), "IsZero")
}

// plainKey reports whether name is a key of ASCII letters, digits, '_',
// '-' and '.': one encoding/json takes as a tag name and folds only by
// ASCII case, of at most maxPlainKey bytes, written without an escape.
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

// plainOptions reports whether a tag's options are only omitempty and
// omitzero. Any other (",string", or case:, inline, format: and the rest
// that encoding/json reads when built with GOEXPERIMENT=jsonv2, or one it
// ignores) leaves the struct to encoding/json.
func plainOptions(opts string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o != "omitempty" && o != "omitzero" {
			return false
		}
	}
	return true
}

// bindKind groups the kinds the fast paths store; 0 is one they do not.
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
