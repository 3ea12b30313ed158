package schema

import (
	"bytes"
	"errors"
	"reflect"
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
