package artemis

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type bindName string

// bindKinds has a field of each kind the fast path stores, and the fields
// encoding/json skips.
type bindKinds struct {
	S      string
	B      bool
	I      int
	I8     int8
	I16    int16 `json:"i16,omitempty"`
	I32    int32
	I64    int64
	U      uint
	U8     uint8
	U16    uint16
	U32    uint32
	U64    uint64
	UP     uintptr
	F32    float32
	F64    float64
	Named  bindName
	Skip   string `json:"-"`
	Dash   string `json:"-,"` //nolint:staticcheck // the key "-", as encoding/json reads it
	Tagged string `json:"tag_name"`
	hidden string
}

// prefilled is a bindKinds with every field set, so a test sees which
// fields a decode leaves as they were.
func prefilled() bindKinds {
	return bindKinds{S: "s0", B: true, I: -1, I8: -2, I16: -3, I32: -4, I64: -5, U: 1, U8: 2, U16: 3, U32: 4, U64: 5, UP: 6,
		F32: 1.5, F64: 2.5, Named: "n0", Skip: "k0", Dash: "d0", Tagged: "t0", hidden: "h0"}
}

// bindBoth decodes data into prefilled values by Bind and by
// json.Unmarshal and fails the test when they differ in what they stored
// or in their errors.
func bindBoth[T any](t testing.TB, data string, fill func() T) {
	t.Helper()
	got, want := fill(), fill()
	env := &Envelope{Data: json.RawMessage(data)}
	gotErr := env.Bind(&got)
	wantErr := json.Unmarshal([]byte(data), &want)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("data %q: Bind's error %v, json.Unmarshal's %v", data, gotErr, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("data %q: Bind stored %+v, json.Unmarshal %+v", data, got, want)
	}
}

func TestBindFastPathStoresWhatUnmarshalStores(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		fast       bool // the fast path decodes it (else encoding/json does)
	}{
		{"every kind", `{"S":"café ☕","B":false,"I":-9007199254740993,"I8":-128,"i16":32767,"I32":7,"I64":9223372036854775807,` +
			`"U":18446744073709551615,"U8":255,"U16":65535,"U32":4294967295,"U64":0,"UP":9,"F32":3.4e38,"F64":-0,"Named":"x","tag_name":"t"}`, true},
		{"empty object", `{}`, true},
		{"whitespace around", " \n{ \"S\" : \"a\" ,\t\"I\":1 } \r\n", true},
		{"keys folded by ASCII case", `{"s":"lower","i16":1,"I16":2,"TAG_NAME":"up","f64":1e2}`, true},
		{"duplicate keys: the last wins", `{"S":"a","S":"b","I":1,"I":2}`, true},
		{"null leaves a field as it was", `{"S":null,"B":null,"I":null,"F64":null}`, true},
		{"null after a value", `{"S":"a","S":null}`, true},
		{"escapes in a value", `{"S":"tab\tquote\" \u00e9 \ud83d\ude00 \ud800 end"}`, true},
		{"an escaped key", `{"\u0053":"by escape","T\u0041G_name":"t"}`, true},
		{"unknown keys of every shape skipped", `{"x":{"a":[1,{"b":null}]},"y":[],"z":"s","S":"kept","w":true,"v":1.5e-3}`, true},
		{"skipped fields stay", `{"Skip":"no","-":"dash","hidden":"no","Hidden":"no"}`, true},
		{"floats exactly as ParseFloat reads them", `{"F32":0.1,"F64":0.30000000000000004,"I":0}`, true},

		{"an integer out of int8's range", `{"I8":128,"S":"after"}`, false},
		{"a negative uint", `{"U":-1}`, false},
		{"a fraction into an int", `{"I":1.5}`, false},
		{"an exponent into an int", `{"I":1e3}`, false},
		{"a float32 overflow", `{"F32":3.5e38}`, false},
		{"a float64 overflow", `{"F64":1e400}`, false},
		{"a number into a string", `{"S":1}`, false},
		{"a string into a number", `{"I":"1"}`, false},
		{"a string into a bool", `{"B":"true"}`, false},
		{"an object into a string", `{"S":{}}`, false},
		{"an array into a number", `{"I":[1]}`, false},
		{"a Kelvin sign folds onto K by Unicode's rules", `{"S":"a","\u212a":1}`, false},
		{"a non-ASCII key", `{"é":1,"S":"b"}`, false},
		{"not an object", `[1,2]`, false},
		{"a string", `"s"`, false},
		{"invalid JSON", `{"S":"a",}`, false},
		{"trailing text", `{"S":"a"} x`, false},
		{"two objects", `{"S":"a"}{"S":"b"}`, false},
		{"a leading zero", `{"I":01}`, false},
		{"invalid UTF-8 in a string", "{\"S\":\"a\xffb\"}", false},
		{"invalid UTF-8 in a skipped value", "{\"x\":\"a\xffb\",\"S\":\"c\"}", false},
		{"unclosed", `{"S":"a"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bindBoth(t, tc.data, prefilled)
			v := prefilled()
			assert.Equal(t, tc.fast, bindStruct(tc.data, &v), "fast path taken")
			if !tc.fast {
				assert.Equal(t, prefilled(), v, "the fast path stored something and then gave up")
			}
		})
	}
}

func TestBindFastPathStoresMoreThanItsStack(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{`)
	for i := range 3 * bindStoresOnStack {
		fmt.Fprintf(&b, `"I":%d,"F64":%d.5,`, i, i)
	}
	b.WriteString(`"S":"last"}`)
	v := prefilled()
	require.True(t, bindStruct(b.String(), &v), "fast path taken")
	assert.Equal(t, 3*bindStoresOnStack-1, v.I)
	assert.Equal(t, "last", v.S)
	bindBoth(t, b.String(), prefilled)
}

func TestBindKeysLongerThanAnyName(t *testing.T) {
	long := strings.Repeat("k", maxPlainKey+1)
	v := prefilled()
	assert.True(t, bindStruct(`{"`+long+`":1,"S":"x"}`, &v), "a long ASCII key matches nothing")
	assert.Equal(t, "x", v.S)
	kelvins := `{"` + strings.Repeat("\u212a", maxPlainKey/3+1) + `":1}`
	assert.False(t, bindStruct(kelvins, &v), "a long key that may fold to a shorter one")
	bindBoth(t, kelvins, prefilled)
}

type (
	bindEmbedded struct {
		bindInner
		S string
	}
	bindInner  struct{ I int }
	bindTime   struct{ At time.Time }
	bindNumber struct{ N json.Number }
	bindQuoted struct {
		I int `json:",string"`
	}
	bindFoldTwins struct {
		ID string
		Id string //nolint:revive // the point of the type
	}
	bindSameName struct {
		A string
		B string `json:"A"`
	}
	bindPunct struct {
		S string `json:"$s"`
	}
	bindUnicode  struct{ Größe int }
	bindPointer  struct{ S *string }
	bindSlice    struct{ L []int }
	bindSelf     struct{ S string }
	bindTextKind struct{ T bindText }
	bindText     string
)

func (b *bindSelf) UnmarshalJSON([]byte) error { b.S = "by its method"; return nil }
func (t *bindText) UnmarshalText([]byte) error { *t = "by its text method"; return nil }

func TestBindLeavesOtherTypesToEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		data string
	}{
		{"an embedded struct", &bindEmbedded{}, `{"I":1,"S":"a"}`},
		{"time.Time", &bindTime{}, `{"At":"2026-12-04T10:00:00Z"}`},
		{"json.Number checks its string", &bindNumber{}, `{"N":"not a number"}`},
		{"the string option", &bindQuoted{}, `{"I":"5"}`},
		{"names one case apart", &bindFoldTwins{}, `{"id":"x"}`},
		{"a tag naming another field", &bindSameName{}, `{"A":"x"}`},
		{"punctuation in a tag", &bindPunct{}, `{"$s":"x"}`},
		{"a non-ASCII field name", &bindUnicode{}, `{"grösse":1}`},
		{"a pointer field", &bindPointer{}, `{"S":"x"}`},
		{"a slice field", &bindSlice{}, `{"L":[1]}`},
		{"a struct that decodes itself", &bindSelf{}, `{"S":"x"}`},
		{"a field that decodes itself", &bindTextKind{}, `{"T":"x"}`},
		{"a map", &map[string]any{}, `{"S":"x"}`},
		{"a pointer to a pointer", new(*bindKinds), `{"S":"x"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.False(t, bindStruct(tc.data, tc.v), "fast path taken")
			want := reflect.New(reflect.TypeOf(tc.v).Elem())
			wantErr := json.Unmarshal([]byte(tc.data), want.Interface())
			got := reflect.New(reflect.TypeOf(tc.v).Elem())
			gotErr := (&Envelope{Data: json.RawMessage(tc.data)}).Bind(got.Interface())
			assert.Equal(t, fmt.Sprint(wantErr), fmt.Sprint(gotErr))
			assert.Equal(t, want.Interface(), got.Interface())
		})
	}
	var nilPtr *bindKinds
	assert.False(t, bindStruct(`{}`, nilPtr))
	assert.False(t, bindStruct(`{}`, bindKinds{}))
	assert.Equal(t, fmt.Sprint(json.Unmarshal([]byte(`{}`), nilPtr)), fmt.Sprint((&Envelope{Data: json.RawMessage(`{}`)}).Bind(nilPtr)))
}

// TestBindStoresStringsOfTheirOwn: a string Bind stores does not share
// Data's bytes, which the caller may reuse.
func TestBindStoresStringsOfTheirOwn(t *testing.T) {
	env := &Envelope{Data: json.RawMessage(`{"S":"abc"}`)}
	var v bindKinds
	require.NoError(t, env.Bind(&v))
	copy(env.Data, `{"S":"xyz"}`)
	assert.Equal(t, "abc", v.S)
}

func TestBindOfTheEnvelopesItDecodes(t *testing.T) {
	for _, data := range []any{benchOrderStruct(), benchOrderStruct1K()} {
		env, err := benchRoundTrip(data)
		require.NoError(t, err)
		var got benchOrder
		assert.True(t, bindStruct(stringView(env.Data), &got), "fast path taken")
		require.NoError(t, env.Bind(&got))
		assert.Equal(t, data, got)
	}
}

// FuzzBindMatchesUnmarshal: whatever data holds, Bind stores what
// json.Unmarshal stores and fails as it fails.
func FuzzBindMatchesUnmarshal(f *testing.F) {
	for _, s := range []string{
		`{"S":"a","B":true,"I":-1,"I8":1,"i16":2,"U8":3,"F32":1.5,"F64":2e10,"Named":"n","tag_name":"t"}`,
		`{"s":"x","u64":18446744073709551615,"up":1}`, `{"S":null}`, `{"x":[{"y":"z"}],"S":"\u00e9"}`,
		`{"I8":-129}`, `{"F32":1e39}`, `{"S":1}`, `{}`, ` {"B":false} `, `[]`, `{"S":"a"`, "{\"S\":\"\xff\"}",
		`{"\u212a":1}`, `{"ſ":"long s"}`, `{"S":"\ud800"}`, `{"Dash":"no","-":"yes"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if data == "" {
			return // Bind reads missing data as {}
		}
		bindBoth(t, data, prefilled)
		bindBoth(t, data, benchOrderStruct)
	})
}
