package schema

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// decodeSeeds are the cases decodeJSON must answer as the validator's own
// decoder (jsonschema.UnmarshalJSON, over encoding/json) does.
var decodeSeeds = []string{
	`{}`, `[]`, `{"order_id":1042,"amount":99.9,"currency":"USD"}`,
	` { "a" : [ 1 , -0.5e+10 , 2E-3 , true , false , null , "x" ] } `,
	`{"big":123456789012345678901234567890,"neg":-0,"exp":1e400}`,
	`{"esc":"\"\\\/\b\f\n\r\t\u00e9\u20ac\ud83d\ude00"}`,
	`{"lone":"\ud800","lone2":"\udc00x","pair-broken":"\ud800\u0041","twohigh":"\ud800\ud800"}`,
	"{\"raw\":\"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\"}",
	"{\"bad-utf8\":\"a\xffb\xc3\"}",
	`{"dup":1,"dup":2}`, `{"nested":{"a":{"b":{"c":[[[]]]}}}}`, `"just a string"`, `12`, `null`,
	// Invalid: every one is refused.
	``, ` `, `{`, `{"a"`, `{"a":}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{"a":1}x`, `{"a":1}{}`, `{'a':1}`,
	`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":+1}`, `{"a":tru}`, `{"a":nul}`,
	"{\"a\":\"tab\there\"}", `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12G4"}`, `{"a":"open}`, `{1:2}`,
	`{"a":"\ud800\u12"}`, `[`, `]`, `{"a":[}`, `{"a" 1}`, `{"a":1 "b":2}`,
}

func TestDecodeJSONAgreesWithTheValidatorsDecoder(t *testing.T) {
	for _, s := range decodeSeeds {
		compareDecoders(t, []byte(s))
	}
}

func FuzzDecodeJSON(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { compareDecoders(t, data) })
}

func compareDecoders(t *testing.T, data []byte) {
	t.Helper()
	want, wantErr := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	got, gotErr := decodeJSON(data, nil)
	var be *boundError
	if wantErr == nil && errors.As(gotErr, &be) {
		return // JSON, but beyond the check's bounds (TestDecodeJSONBounds)
	}
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("%q: error %v, the validator's decoder says %v", data, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %#v\nwant %#v", data, got, want)
	}
}

// TestDecodeJSONBounds: a number or a nesting at a bound is read, one past
// it is a *boundError at the value's pointer, whatever the grammar allows.
func TestDecodeJSONBounds(t *testing.T) {
	nest := func(n int) string { return strings.Repeat(`[`, n) + strings.Repeat(`]`, n) }
	for _, tc := range []struct {
		data, pointer string // pointer "": within the bounds
	}{
		{`{"a":1e400,"b":-1E-400,"c":2e+400,"d":1e0000000400}`, ""},
		{`{"a":1e401}`, "/a"},
		{`{"a":[0,1e-401]}`, "/a/1"},
		{`{"a":1e99999999999999999999}`, "/a"},
		{`{"a":` + strings.Repeat("9", 400) + `}`, ""},
		{`{"a":0.` + strings.Repeat("9", 399) + `}`, ""},
		{`{"a":-` + strings.Repeat("9", 200) + `.` + strings.Repeat("9", 200) + `e-400}`, ""},
		{`{"a":` + strings.Repeat("9", 401) + `}`, "/a"},
		{`{"x/y~z":{"":0.` + strings.Repeat("0", 400) + `}}`, "/x~1y~0z/"},
		// The innermost array of nest(n) is inside n-1 arrays, and the
		// data object when it is a member.
		{`{"a":` + nest(32) + `}`, ""},
		{`{"a":` + nest(33) + `}`, "/a" + strings.Repeat("/0", 32)},
		{nest(33), ""},
		{nest(34), strings.Repeat("/0", 33)},
	} {
		_, err := decodeJSON([]byte(tc.data), nil)
		var be *boundError
		switch {
		case tc.pointer == "" && err != nil:
			t.Errorf("%.60s: %v, want it read", tc.data, err)
		case tc.pointer != "" && !errors.As(err, &be):
			t.Errorf("%.60s: %v, want a bound error at %s", tc.data, err, tc.pointer)
		case tc.pointer != "" && be.pointer() != tc.pointer:
			t.Errorf("%.60s: at %q, want %q", tc.data, be.pointer(), tc.pointer)
		}
	}
	// Invalid grammar comes first: a long number that is not one is not JSON.
	if _, err := decodeJSON([]byte(`{"a":`+strings.Repeat("9", 500)+`.}`), nil); err == nil || errors.As(err, new(*boundError)) {
		t.Errorf("a malformed long number: %v", err)
	}
}

// TestDecodeJSONStopsWhenDoneCloses: a closed done stops the decode of a
// large data object with errStopped; nil never does.
func TestDecodeJSONStopsWhenDoneCloses(t *testing.T) {
	data := []byte(`[` + strings.TrimSuffix(strings.Repeat(`1,`, 5000), ",") + `]`)
	done := make(chan struct{})
	close(done)
	if _, err := decodeJSON(data, done); !errors.Is(err, errStopped) {
		t.Fatalf("got %v, want errStopped", err)
	}
	if _, err := decodeJSON(data, nil); err != nil {
		t.Fatal(err)
	}
}
