package artemis

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStructPlanOfEachShape(t *testing.T) {
	for _, tc := range []struct {
		name          string
		typ           reflect.Type
		plan          bool
		bind, marshal bool
	}{
		{"a flat struct", reflect.TypeFor[bindKinds](), true, true, true},
		{"omitempty and omitzero", reflect.TypeFor[marshalKinds](), true, true, true},
		{"a struct that decodes itself", reflect.TypeFor[bindSelf](), true, false, true},
		{"a field that decodes itself", reflect.TypeFor[bindTextKind](), true, false, true},
		{"a struct that encodes itself", reflect.TypeFor[marshalSelf](), true, true, false},
		{"a pointer that encodes itself", reflect.TypeFor[marshalText](), true, true, false},
		{"a field that encodes itself", reflect.TypeFor[marshalTextKind](), true, true, false},
		{"omitzero asks IsZero", reflect.TypeFor[zeroDecides](), true, true, false},
		{"an embedded struct", reflect.TypeFor[bindEmbedded](), false, false, false},
		{"time.Time", reflect.TypeFor[bindTime](), false, false, false},
		{"json.Number", reflect.TypeFor[bindNumber](), false, false, false},
		{"the string option", reflect.TypeFor[bindQuoted](), false, false, false},
		{"names one case apart", reflect.TypeFor[bindFoldTwins](), false, false, false},
		{"a tag naming another field", reflect.TypeFor[bindSameName](), false, false, false},
		{"punctuation in a tag", reflect.TypeFor[bindPunct](), false, false, false},
		{"a non-ASCII name", reflect.TypeFor[bindUnicode](), false, false, false},
		{"a pointer field", reflect.TypeFor[bindPointer](), false, false, false},
		{"a slice field", reflect.TypeFor[bindSlice](), false, false, false},
		{"not a struct", reflect.TypeFor[map[string]any](), false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planFor(tc.typ)
			if !tc.plan {
				assert.Nil(t, p)
				return
			}
			if assert.NotNil(t, p) {
				assert.Equal(t, tc.bind, p.bind, "bind")
				assert.Equal(t, tc.marshal, p.marshal, "marshal")
				assert.Same(t, p, planFor(tc.typ), "cached")
			}
		})
	}
}

func TestStructPlanFields(t *testing.T) {
	p := planFor(reflect.TypeFor[marshalKinds]())
	var names []string
	for _, f := range p.fields {
		names = append(names, f.name)
		assert.Equal(t, `"`+f.name+`":`, f.member)
	}
	// In field order; "-" and the unexported field are not there.
	assert.Equal(t, []string{"s", "se", "sz", "b", "be", "i", "ie", "i8", "u", "ue", "f", "fe", "fz", "f32", "F32Z", "Named"}, names)
	assert.False(t, p.fields[0].omitZeroValue)
	assert.True(t, p.fields[1].omitZeroValue)
	assert.True(t, p.fields[2].omitZeroValue)
	assert.Equal(t, 32, p.fields[13].bits)
	assert.Equal(t, 8, p.fields[7].bits)
	assert.Equal(t, reflect.Int, p.fields[7].kind, "int8 is read and written as an integer")
	assert.True(t, plainKey("a-b_c.D9"))
	assert.False(t, plainKey(""))
	assert.False(t, plainKey("a b"))
	assert.False(t, plainKey(string(make([]byte, maxPlainKey+1))))
}
