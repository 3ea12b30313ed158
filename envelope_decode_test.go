package artemis

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDecodeDataIsCapped: Decode backs Data and the strings with one copy
// of the body, so growing Data must not write over the bytes the strings
// that follow it (meta, attempts, unknown keys) are read from.
func TestDecodeDataIsCapped(t *testing.T) {
	body := []byte(`{"job":"urn:x","trace_id":"t","data":{"a":1},"meta":{"id":"i","schema_version":1},"attempts":0,"z":"kept"}`)
	env, err := Decode(body)
	require.NoError(t, err)
	grown := append(env.Data, `XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX`...) //nolint:gocritic // appending to a copy is the point: it must not reach the decoder's memory
	grown[0] = '['
	assert.Equal(t, `{"a":1}`, string(env.Data))
	assert.Equal(t, "i", env.Meta.ID)
	out, err := env.Encode()
	require.NoError(t, err)
	assert.Equal(t, `{"job":"urn:x","trace_id":"t","data":{"a":1},"meta":{"id":"i","queue":"","lang":"","schema_version":1,"created_at":0},"attempts":0,"z":"kept"}`, string(out))
}

func TestDecodeURNAlias(t *testing.T) {
	const rest = `"trace_id":"t-1","data":{},"meta":{"id":"m-1","queue":"q","lang":"node","schema_version":1,"created_at":5},"attempts":0`
	const canonRest = `"trace_id":"t-1","data":{},"meta":{"id":"m-1","queue":"q","lang":"node","schema_version":1,"created_at":5},"attempts":0`
	tests := []struct {
		name    string
		in      string
		wantURN string
		wantOut string
	}{
		{
			name:    "job only",
			in:      `{"job":"urn:a:job",` + rest + `}`,
			wantURN: "urn:a:job",
			wantOut: `{"job":"urn:a:job",` + canonRest + `}`,
		},
		{
			name:    "urn only becomes job",
			in:      `{"urn":"urn:a:alias",` + rest + `}`,
			wantURN: "urn:a:alias",
			wantOut: `{"job":"urn:a:alias",` + canonRest + `}`,
		},
		{
			name:    "urn after the other keys becomes job",
			in:      `{` + rest + `,"urn":"urn:a:alias"}`,
			wantURN: "urn:a:alias",
			wantOut: `{"job":"urn:a:alias",` + canonRest + `}`,
		},
		{
			name:    "job null uses urn",
			in:      `{"job":null,"urn":"urn:a:alias",` + rest + `}`,
			wantURN: "urn:a:alias",
			wantOut: `{"job":"urn:a:alias",` + canonRest + `}`,
		},
		{
			name:    "both: job wins, urn kept as an unknown key",
			in:      `{"urn":"urn:a:alias","job":"urn:a:job",` + rest + `}`,
			wantURN: "urn:a:job",
			wantOut: `{"job":"urn:a:job",` + canonRest + `,"urn":"urn:a:alias"}`,
		},
		{
			name:    "both with unknown keys around: order kept",
			in:      `{"a":1,"urn":"urn:a:alias","b":2,"job":"urn:a:job",` + rest + `,"c":3}`,
			wantURN: "urn:a:job",
			wantOut: `{"job":"urn:a:job",` + canonRest + `,"a":1,"urn":"urn:a:alias","b":2,"c":3}`,
		},
		{
			name:    "alias removed from between unknown keys",
			in:      `{"a":1,"urn":"urn:a:alias","b":2,` + rest + `}`,
			wantURN: "urn:a:alias",
			wantOut: `{"job":"urn:a:alias",` + canonRest + `,"a":1,"b":2}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := mustDecode(t, tt.in)
			if env.URN != tt.wantURN {
				t.Errorf("URN %q, want %q", env.URN, tt.wantURN)
			}
			if err := env.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			if got := mustEncode(t, env); string(got) != tt.wantOut {
				t.Errorf("Encode\n got: %s\nwant: %s", got, tt.wantOut)
			}
		})
	}
}

func TestDecodeKeepsUnknownKeysAndDataBytes(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // the exact re-encoding
	}{
		{
			name: "canonical input is reproduced exactly",
			in:   `{"job":"urn:a:b","trace_id":"t","data":{"k":"v"},"meta":{"id":"m","queue":"q","lang":"py","schema_version":1,"created_at":1,"host":"h1","pid":42},"attempts":1,"z":true,"a":[1,{"b":null}]}`,
			want: `{"job":"urn:a:b","trace_id":"t","data":{"k":"v"},"meta":{"id":"m","queue":"q","lang":"py","schema_version":1,"created_at":1,"host":"h1","pid":42},"attempts":1,"z":true,"a":[1,{"b":null}]}`,
		},
		{
			name: "unknown keys keep their input order wherever they appear",
			in:   `{"u1":1,"meta":{"m1":"x","schema_version":1,"m2":{"deep":[1,2]},"id":"m","lang":"java","queue":"q","created_at":2,"m3":false},"u2":"two","job":"urn:a:b","data":{},"u3":null,"trace_id":"t","attempts":0,"u4":1.5e3}`,
			want: `{"job":"urn:a:b","trace_id":"t","data":{},"meta":{"id":"m","queue":"q","lang":"java","schema_version":1,"created_at":2,"m1":"x","m2":{"deep":[1,2]},"m3":false},"attempts":0,"u1":1,"u2":"two","u3":null,"u4":1.5e3}`,
		},
		{
			name: "whitespace is dropped everywhere and strings re-escaped, in data and unknown values too",
			in:   "{ \"job\" : \"urn:a:b\" ,\n \"trace_id\":\"t\",\n \"data\" : { \"a\" : [ 1 , 2 ],\n  \"s\":\"caf\\u00e9 \\\" \\/ \\n\" } ,\n \"meta\":{ \"id\":\"m\", \"schema_version\" : 1 , \"x\" : [ 1 ] },\n \"attempts\" : 0 , \"u\" : { \"k\" : 1 } }\n",
			want: "{\"job\":\"urn:a:b\",\"trace_id\":\"t\",\"data\":{\"a\":[1,2],\"s\":\"café \\\" / \\n\"},\"meta\":{\"id\":\"m\",\"queue\":\"\",\"lang\":\"\",\"schema_version\":1,\"created_at\":0,\"x\":[1]},\"attempts\":0,\"u\":{\"k\":1}}",
		},
		{
			name: "big integers and odd numbers in data untouched",
			in:   `{"job":"urn:a:b","trace_id":"t","data":{"a":9007199254740993,"b":123456789012345678901234567890,"c":-0,"d":1E+2,"e":0.10},"meta":{"schema_version":1},"attempts":0}`,
			want: `{"job":"urn:a:b","trace_id":"t","data":{"a":9007199254740993,"b":123456789012345678901234567890,"c":-0,"d":1E+2,"e":0.10},"meta":{"id":"","queue":"","lang":"","schema_version":1,"created_at":0},"attempts":0}`,
		},
		{
			name: "escaped keys are recognised and written back canonically",
			in:   `{"j\u006fb":"urn:a:b","trace_id":"t","data":{},"meta":{"schema_versio\u006e":1},"attempts":0,"\u00fcber":"x"}`,
			want: `{"job":"urn:a:b","trace_id":"t","data":{},"meta":{"id":"","queue":"","lang":"","schema_version":1,"created_at":0},"attempts":0,"über":"x"}`,
		},
		{
			name: "escaped strings in known fields are written canonically",
			in:   `{"job":"urn:caf\u00e9:\u003cx\u003e","trace_id":"t\/1","data":{},"meta":{"id":"m","queue":"q\u2028","lang":"go","schema_version":1,"created_at":3},"attempts":0}`,
			want: "{\"job\":\"urn:café:<x>\",\"trace_id\":\"t/1\",\"data\":{},\"meta\":{\"id\":\"m\",\"queue\":\"q\u2028\",\"lang\":\"go\",\"schema_version\":1,\"created_at\":3},\"attempts\":0}",
		},
		{
			name: "dead_letter round trips and stays last",
			in:   `{"job":"urn:a:b","trace_id":"t","data":{"x":1},"meta":{"id":"m","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":3,"dead_letter":{"reason":"failed","error":"Payment gateway timeout","exception":"*app.GatewayError","failed_at":1749132730000,"original_queue":"orders","attempts":3,"lang":"go"}}`,
			want: `{"job":"urn:a:b","trace_id":"t","data":{"x":1},"meta":{"id":"m","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":3,"dead_letter":{"reason":"failed","error":"Payment gateway timeout","exception":"*app.GatewayError","failed_at":1749132730000,"original_queue":"orders","attempts":3,"lang":"go"}}`,
		},
		{
			name: "dead_letter with nulls and in another order",
			in:   `{"dead_letter":{"lang":"php","attempts":0,"original_queue":"q","failed_at":1,"exception":null,"error":null,"reason":"poison"},"job":"urn:a:b","trace_id":"t","data":{},"meta":{"id":"m","queue":"q","lang":"php","schema_version":1,"created_at":1},"attempts":0,"after":1}`,
			want: `{"job":"urn:a:b","trace_id":"t","data":{},"meta":{"id":"m","queue":"q","lang":"php","schema_version":1,"created_at":1},"attempts":0,"after":1,"dead_letter":{"reason":"poison","error":null,"exception":null,"failed_at":1,"original_queue":"q","attempts":0,"lang":"php"}}`,
		},
		{
			name: "dead_letter null is dropped",
			in:   `{"job":"urn:a:b","trace_id":"t","data":{},"meta":{"id":"m","queue":"q","lang":"go","schema_version":1,"created_at":1},"attempts":0,"dead_letter":null}`,
			want: `{"job":"urn:a:b","trace_id":"t","data":{},"meta":{"id":"m","queue":"q","lang":"go","schema_version":1,"created_at":1},"attempts":0}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := mustDecode(t, tt.in)
			if err := env.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			got := mustEncode(t, env)
			if string(got) != tt.want {
				t.Errorf("Decode+Encode\n got: %s\nwant: %s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("not valid JSON: %s", got)
			}
			// A second pass is stable.
			if again := mustEncode(t, mustDecode(t, string(got))); !bytes.Equal(again, got) {
				t.Errorf("second pass differs\n got: %s\nwant: %s", again, got)
			}
		})
	}
}

func TestDecodeDataIsExactAndOwned(t *testing.T) {
	const data = "{ \"name\" : \"caf\\u00e9\" ,\t\"big\":123456789012345678901234567890, \"s\":\"\\ud83d\\ude00\" }"
	body := []byte(`{"job":"urn:a:b","trace_id":"t","data":` + data + `,"meta":{"schema_version":1},"attempts":0}`)
	// Data is the canonical form of the data object (whitespace removed,
	// escapes rewritten, number literals as they came).
	const canonical = `{"name":"café","big":123456789012345678901234567890,"s":"😀"}`
	env, err := Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	if string(env.Data) != canonical {
		t.Errorf("Data\n got: %s\nwant: %s", env.Data, canonical)
	}
	// Writing to the caller's buffer or to Data must not reach the other.
	for i := range body {
		body[i] = 'X'
	}
	if string(env.Data) != canonical || env.URN != "urn:a:b" {
		t.Errorf("the envelope shares memory with the input: Data %s URN %q", env.Data, env.URN)
	}
	env.Data[0] = '['
	if env.TraceID != "t" {
		t.Errorf("Data shares memory with the strings")
	}
}

func TestDecodeDeadLetterFields(t *testing.T) {
	env := mustDecode(t, `{"job":"urn:a:b","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":3,"dead_letter":{"reason":"failed","error":"boom","exception":"*errors.errorString","failed_at":1749132730000,"original_queue":"orders","attempts":3,"lang":"node"}}`)
	want := DeadLetter{Reason: "failed", Error: ptr("boom"), Exception: ptr("*errors.errorString"), FailedAt: 1749132730000, OriginalQueue: "orders", Attempts: 3, Lang: "node"}
	dl := env.DeadLetter
	if dl == nil || dl.Reason != want.Reason || dl.Error == nil || *dl.Error != *want.Error || dl.Exception == nil ||
		*dl.Exception != *want.Exception || dl.FailedAt != want.FailedAt || dl.OriginalQueue != want.OriginalQueue ||
		dl.Attempts != want.Attempts || dl.Lang != want.Lang {
		t.Errorf("dead_letter %+v, want %+v", dl, want)
	}
}

func TestDecodeFailures(t *testing.T) {
	valid := contractExample
	tests := []struct {
		name string
		body string
		msg  string
	}{
		{"empty body", "", "JSON"},
		{"whitespace only", " \n\t", "JSON"},
		{"invalid UTF-8 in a string", strings.Replace(valid, "orders:created", "orders:\xffcreated", 1), "UTF-8"},
		{"invalid UTF-8 in data", strings.Replace(valid, `{"order_id":1042}`, "{\"n\":\"\xc3\x28\"}", 1), "UTF-8"},
		{"invalid UTF-8 overlong", strings.Replace(valid, `"orders"`, "\"\xc0\xaf\"", 1), "UTF-8"},
		{"invalid UTF-8 surrogate", strings.Replace(valid, `"orders"`, "\"\xed\xa0\x80\"", 1), "UTF-8"},
		{"invalid JSON", `{"job":"urn:a:b",}`, "JSON"},
		{"unterminated", valid[:len(valid)-1], "JSON"},
		{"single quotes", `{'job':'urn:a:b'}`, "JSON"},
		{"trailing garbage", valid + "x", "JSON"},
		{"second object", valid + valid, "JSON"},
		{"trailing comma object", valid + ",{}", "JSON"},
		{"UTF-8 BOM", "\xef\xbb\xbf" + valid, "JSON"},
		{"JSON array", `[` + valid + `]`, "not an object"},
		{"JSON empty array", `[]`, "not an object"},
		{"JSON number", `1042`, "not an object"},
		{"JSON string", `"` + strings.ReplaceAll(valid, `"`, `\"`) + `"`, "not an object"},
		{"JSON null", `null`, "not an object"},
		{"JSON true", `true`, "not an object"},
		{"duplicate job", strings.Replace(valid, `{"job":"urn:babel:orders:created"`, `{"job":"urn:babel:orders:created","job":"urn:evil:x"`, 1), "duplicate"},
		{"duplicate job same value", strings.Replace(valid, `"attempts":0`, `"attempts":0,"job":"urn:babel:orders:created"`, 1), "duplicate"},
		{"duplicate urn", strings.Replace(valid, `"job":`, `"urn":"urn:a:b","urn":`, 1), "duplicate"},
		{"duplicate trace_id", strings.Replace(valid, `"attempts":0`, `"attempts":0,"trace_id":"other"`, 1), "duplicate"},
		{"duplicate data", strings.Replace(valid, `"attempts":0`, `"attempts":0,"data":{}`, 1), "duplicate"},
		{"duplicate meta", strings.Replace(valid, `"attempts":0`, `"attempts":0,"meta":{"schema_version":1}`, 1), "duplicate"},
		{"duplicate attempts", strings.Replace(valid, `"attempts":0`, `"attempts":0,"attempts":5`, 1), "duplicate"},
		{"duplicate dead_letter", strings.Replace(valid, `"attempts":0`, `"attempts":0,"dead_letter":null,"dead_letter":null`, 1), "duplicate"},
		{"duplicate meta.schema_version", strings.Replace(valid, `"schema_version":1`, `"schema_version":1,"schema_version":2`, 1), "duplicate"},
		{"duplicate meta.id", strings.Replace(valid, `"schema_version":1`, `"schema_version":1,"id":"x"`, 1), "duplicate"},
		{"duplicate meta.created_at", strings.Replace(valid, `"schema_version":1`, `"schema_version":1,"created_at":1`, 1), "duplicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := Decode([]byte(tt.body))
			if err == nil {
				t.Fatalf("Decode(%q) succeeded: %+v", tt.body, env)
			}
			if env != nil {
				t.Errorf("Decode returned an envelope with its error")
			}
			if !errors.Is(err, ErrInvalidEnvelope) {
				t.Errorf("error %q does not wrap ErrInvalidEnvelope", err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

func TestDecodeAllowsDuplicateUnknownKeys(t *testing.T) {
	// Unknown keys are not the library's to judge: all of them ride along.
	in := strings.Replace(contractExample, `"attempts":0`, `"attempts":0,"x":1,"x":2`, 1)
	env := mustDecode(t, in)
	if got := mustEncode(t, env); string(got) != in {
		t.Errorf("got %s, want %s", got, in)
	}
}

func TestDecodeStringMatchesDecode(t *testing.T) {
	for _, body := range []string{contractExample, `{"urn":"urn:a:b","trace_id":"t","data":{ },"meta":{"schema_version":1,"x":1},"attempts":0,"y":2}`} {
		a, err := Decode([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := decodeString(body)
		if err != nil {
			t.Fatal(err)
		}
		if ea, eb := mustEncode(t, a), mustEncode(t, b); !bytes.Equal(ea, eb) {
			t.Errorf("decodeString and Decode differ:\n%s\n%s", ea, eb)
		}
	}
	for _, body := range []string{"", "[]", "{\"job\":1}", "\xff"} {
		if _, err := decodeString(body); !errors.Is(err, ErrInvalidEnvelope) {
			t.Errorf("decodeString(%q) = %v", body, err)
		}
	}
}

// Whether data was canonical already (kept) or rewritten, the decoded Data
// owns its memory: writing or appending to it reaches nothing else.
func TestDecodeCanonicalDataIsOwned(t *testing.T) {
	for _, data := range []string{`{"a":[1,2],"s":"x"}`, `{ "a" : [ 1 , 2 ] , "s" : "\u0078" }`} {
		body := []byte(`{"job":"urn:a:b","trace_id":"t","data":` + data + `,"meta":{"schema_version":1},"attempts":0}`)
		env := mustDecode(t, string(body))
		fromString, err := decodeString(string(body))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range []*Envelope{env, fromString} {
			if string(e.Data) != `{"a":[1,2],"s":"x"}` {
				t.Errorf("Data %s", e.Data)
			}
			n := len(e.Data)
			e.Data = append(e.Data, strings.Repeat("X", 64)...) // into Data's spare capacity, if it has any
			for i := range e.Data[:n] {
				e.Data[i] = 'Y'
			}
			if e.URN != "urn:a:b" || e.TraceID != "t" || len(e.Data) != n+64 {
				t.Errorf("writing to Data reached the envelope's strings: %q %q", e.URN, e.TraceID)
			}
		}
	}
}

// scanValid is the fast path's verdict on a whole JSON text.
func scanValid(s string) bool {
	end, _, ok := jsoncodec.ScanValue(s, jsoncodec.SkipSpace(s, 0), 0)
	return ok && jsoncodec.SkipSpace(s, end) == len(s)
}

// nesting returns the deepest nesting of objects and arrays in s, counting
// brackets outside strings (s need not be valid).
func nesting(s string) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

func checkFastDecode(t *testing.T, s string) {
	t.Helper()
	want := utf8.ValidString(s) && json.Valid([]byte(s))
	shallow := nesting(s) < jsoncodec.MaxScanDepth
	if got := scanValid(s); got != want && (got || shallow) {
		t.Fatalf("jsoncodec.ScanValue says valid=%t, utf8+encoding/json say %t: %q", got, want, s)
	}
	fast, ok := decodeFast(s)
	checked, err := decodeChecked(s)
	switch {
	case ok && err != nil:
		t.Fatalf("the fast path decoded a body the checked path refuses (%v): %q", err, s)
	case ok:
		require.Equal(t, checked, fast, "the paths decode %q differently", s)
	case err == nil && shallow:
		t.Fatalf("the fast path refused a body the checked path decodes: %q", s)
	}
}

func TestFastDecodeMatchesChecked(t *testing.T) {
	for _, s := range scanSeeds {
		checkFastDecode(t, s)
	}
	// Deeper than the fast path goes: decoded by the checked path all the same.
	deep := `{"job":"urn:x","trace_id":"t","data":{"d":` + strings.Repeat("[", jsoncodec.MaxScanDepth+5) + strings.Repeat("]", jsoncodec.MaxScanDepth+5) +
		`},"meta":{"schema_version":1},"attempts":0}`
	_, ok := decodeFast(deep)
	assert.False(t, ok, "the fast path stops at its depth limit")
	env, err := Decode([]byte(deep))
	require.NoError(t, err)
	require.NoError(t, env.Validate())
	checkFastDecode(t, deep)

	// Random edits of the seeds, with the bytes that matter to a JSON scanner.
	const alphabet = "{}[]\":,\\ \t\n0123456789-+.eEtrufalsn\x00\x1f\x7f\xc3\xa9\xed\xa0\x80\xff"
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := []byte(scanSeeds[rng.IntN(5)])
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(b) + 1)
			c := alphabet[rng.IntN(len(alphabet))]
			switch rng.IntN(3) {
			case 0: // insert
				b = append(b[:i], append([]byte{c}, b[i:]...)...)
			case 1: // replace
				if i < len(b) {
					b[i] = c
				}
			default: // delete
				if i < len(b) {
					b = append(b[:i], b[i+1:]...)
				}
			}
		}
		checkFastDecode(t, string(b))
	}
}

// FuzzFastDecodeMatchesChecked runs the same comparison on fuzzed bodies:
//
//	go test -run '^$' -fuzz '^FuzzFastDecodeMatchesChecked$' -fuzztime 1m -parallel 1 .
func FuzzFastDecodeMatchesChecked(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastDecode(t, string(body))
	})
}
