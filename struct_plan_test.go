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
		{"a case option", reflect.TypeFor[planCaseOption](), false, false, false},
		{"an inline option", reflect.TypeFor[planInlineOption](), false, false, false},
		{"a format option", reflect.TypeFor[planFormatOption](), false, false, false},
		{"an option no version knows", reflect.TypeFor[planUnknownOption](), false, false, false},
		{"a struct that decodes from a stream", reflect.TypeFor[planDecodesFrom](), true, false, true},
		{"a field that decodes from a stream", reflect.TypeFor[planDecodesFromKind](), true, false, true},
		{"a struct that encodes to a stream", reflect.TypeFor[planEncodesTo](), true, true, false},
		{"a field that appends its text", reflect.TypeFor[planAppendsTextKind](), true, true, false},
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

// Types with what encoding/json reads only when it runs on its second
// version (GOEXPERIMENT=jsonv2): tag options of that version, and methods
// it asks before the first version's (named as it names them; the plan
// goes by the name alone, as their types are not importable here).
type (
	planCaseOption struct {
		S string `json:"s,case:strict"`
	}
	planInlineOption struct {
		S string `json:"s,inline"`
	}
	planFormatOption struct {
		F float64 `json:"f,format:nonfinite"`
	}
	planUnknownOption struct {
		S string `json:"s,omitempty,shout"` //nolint:staticcheck // an unknown option is the case under test
	}
	planDecodesFrom     struct{ S string }
	planDecodesFromKind struct{ T planStream }
	planStream          string
	planEncodesTo       struct{ S string }
	planAppendsTextKind struct{ T planAppender }
	planAppender        string
)

func (*planDecodesFrom) UnmarshalJSONFrom(any) error     { return nil }
func (*planStream) UnmarshalJSONFrom(any) error          { return nil }
func (planEncodesTo) MarshalJSONTo(any) error            { return nil }
func (planAppender) AppendText(b []byte) ([]byte, error) { return b, nil }
