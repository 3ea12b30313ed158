package artemis

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
)

func TestEncodeRejectsNonObjectData(t *testing.T) {
	for _, data := range []string{`[]`, `null`, `"x"`, `1`} {
		env := &Envelope{URN: "urn:a:b", TraceID: "t", Data: json.RawMessage(data)}
		if b, err := env.Encode(); err == nil || !errors.Is(err, ErrInvalidEnvelope) {
			t.Errorf("Encode with data %s: %s, %v; want an ErrInvalidEnvelope", data, b, err)
		}
	}
}

// The canonical re-encode of CONTRACT.md section 1, checked three ways: golden
// files, an independent canonicaliser built on encoding/json's tokenizer, and
// token-by-token equivalence with the input (number literals compared as
// strings).

// refCanonical is an independent canonical writer: encoding/json's
// tokenizer (UseNumber, so number literals come through as written) and a
// writer that escapes only the quote, the backslash and control characters
// (\b \f \n \r \t, else \u00xx in lowercase hex), everything else as UTF-8.
func refCanonical(t testing.TB, raw []byte) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b bytes.Buffer
	type frame struct {
		obj   bool
		n     int  // members or elements written
		value bool // in an object: the next token is a value
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("refCanonical(%q): %v", raw, err)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			b.WriteByte(byte(d))
			continue
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			switch {
			case top.obj && top.value:
				b.WriteByte(':')
				top.value = false
			default:
				if top.n > 0 {
					b.WriteByte(',')
				}
				top.n++
				top.value = top.obj
			}
		}
		switch v := tok.(type) {
		case json.Delim:
			b.WriteByte(byte(v))
			stack = append(stack, frame{obj: v == '{'})
		case string:
			refString(&b, v)
		case json.Number:
			b.WriteString(string(v))
		case bool:
			fmt.Fprint(&b, v)
		case nil:
			b.WriteString("null")
		}
	}
	return b.Bytes()
}

func refString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// jsonTokens lists the tokens of a JSON text, numbers as their literals.
func jsonTokens(t testing.TB, raw []byte) []any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var toks []any
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return toks
		}
		if err != nil {
			t.Fatalf("jsonTokens(%q): %v", raw, err)
		}
		toks = append(toks, tok)
	}
}

func sameTokens(t testing.TB, a, b []byte) bool {
	t.Helper()
	ta, tb := jsonTokens(t, a), jsonTokens(t, b)
	if len(ta) != len(tb) {
		return false
	}
	for i := range ta {
		if ta[i] != tb[i] {
			return false
		}
	}
	return true
}

// member is one member of a JSON object, its value as raw text.
type member struct {
	key string
	val json.RawMessage
}

// objectMembers lists the members of the JSON object raw, in order,
// duplicates kept.
func objectMembers(t testing.TB, raw []byte) []member {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("objectMembers(%q): not an object (%v, %v)", raw, tok, err)
	}
	var ms []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("objectMembers(%q): %v", raw, err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("objectMembers(%q): %v", raw, err)
		}
		ms = append(ms, member{tok.(string), v})
	}
	return ms
}

var (
	envelopeKeys = map[string]bool{"job": true, "trace_id": true, "data": true, "meta": true, "attempts": true, "dead_letter": true}
	metaKeys     = map[string]bool{"id": true, "queue": true, "lang": true, "schema_version": true, "created_at": true}
)

// unknownMembers lists the members of obj that are not in known.
func unknownMembers(t testing.TB, obj []byte, known map[string]bool) []member {
	var out []member
	for _, m := range objectMembers(t, obj) {
		if !known[m.key] {
			out = append(out, m)
		}
	}
	return out
}

func findMember(t testing.TB, obj []byte, key string) json.RawMessage {
	for _, m := range objectMembers(t, obj) {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// checkCanonicalReencode holds out, the Encode of Decode(in), to the
// contract: canonical (the independent writer reproduces it), idempotent,
// and JSON-equivalent to in where it carries in's values (data and the
// unknown members, top level and in meta), number literals identical.
func checkCanonicalReencode(t testing.TB, in, out []byte) {
	t.Helper()
	if ref := refCanonical(t, out); !bytes.Equal(ref, out) {
		t.Fatalf("the re-encode is not canonical\n got: %s\nwant: %s", out, ref)
	}
	again, err := Decode(out)
	if err != nil {
		t.Fatalf("Decode of the re-encode: %v\n%s", err, out)
	}
	twice, err := again.Encode()
	if err != nil {
		t.Fatalf("Encode of the re-encode: %v", err)
	}
	if !bytes.Equal(twice, out) {
		t.Fatalf("not idempotent\n once: %s\ntwice: %s", out, twice)
	}
	if d := findMember(t, in, "data"); d != nil && !sameTokens(t, d, findMember(t, out, "data")) {
		t.Fatalf("data differs\n  in: %s\n out: %s", d, findMember(t, out, "data"))
	}
	inTop := unknownMembers(t, in, envelopeKeys)
	if job := findMember(t, in, "job"); (job == nil || string(job) == "null") && findMember(t, in, "urn") != nil {
		// The urn alias became the job.
		for i, m := range inTop {
			if m.key == "urn" {
				inTop = append(inTop[:i:i], inTop[i+1:]...)
				break
			}
		}
	}
	compareMembers(t, "top level", inTop, unknownMembers(t, out, envelopeKeys))
	if meta := findMember(t, in, "meta"); meta != nil {
		compareMembers(t, "meta", unknownMembers(t, meta, metaKeys), unknownMembers(t, findMember(t, out, "meta"), metaKeys))
	}
}

func compareMembers(t testing.TB, where string, in, out []member) {
	t.Helper()
	if len(in) != len(out) {
		t.Fatalf("%s: %d unknown members in, %d out", where, len(in), len(out))
	}
	for i := range in {
		if in[i].key != out[i].key || !sameTokens(t, in[i].val, out[i].val) {
			t.Fatalf("%s: unknown member %d: in %q:%s, out %q:%s", where, i, in[i].key, in[i].val, out[i].key, out[i].val)
		}
	}
}

// deepPretty nests n arrays around an object, pretty-printed.
func deepPretty(n int) string {
	return `{ "deep" : ` + strings.Repeat("[\n ", n) + `{ "k" : "v\/" }` + strings.Repeat("\n]", n) + " }"
}

// reencodeCases are pretty or escaped bodies whose canonical re-encode is
// pinned in testdata/encode/reencode.
var reencodeCases = []struct{ name, body string }{
	{"pretty", `{
    "job" : "urn:babel:orders:created",
    "trace_id" : "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
    "data" : {
        "order_id" : 1042,
        "lines" : [
            { "sku" : "A-1", "qty" : 2 },
            { "sku" : "B-2", "qty" : 1 }
        ],
        "empty_obj" : { },
        "empty_arr" : [ ],
        "text" : "spaces  inside\tstrings stay"
    },
    "meta" : {
        "id" : "f1e2d3c4-b5a6-4789-90ab-cdef01234567",
        "queue" : "orders",
        "lang" : "php",
        "schema_version" : 1,
        "created_at" : 1749132727000
    },
    "attempts" : 0
}
`},
	{"escapes", `{"job":"urn:babel:text:escaped","trace_id":"t-1","data":{` +
		`"e_acute":"caf\u00e9 caf\u00E9","slash":"a\/b","html":"\u003cb\u003e \u0026 \u003e","quote":"say \"hi\" \u0022","backslash":"c:\\dir \u005c",` +
		`"controls":"\u0000\u0001\u0008\u0009\u000a\u000b\u000c\u000d\u001f\u001F\b\f\n\r\t","del":"\u007f","nbsp":"\u00a0",` +
		`"emoji":"\ud83d\ude00 \uD83D\uDE00","lone":"\ud800 \udc00 x\ud83d","separators":"\u2028\u2029","bom":"\ufeff",` +
		`"k\u00e9y\/":1},"meta":{"id":"m-1","queue":"q","lang":"node","schema_version":1,"created_at":1},"attempts":0}`},
	{"big_integers", `{"job":"urn:babel:num:big","trace_id":"t-1","data":{ "max_safe_plus_2" : 9007199254740993, "neg" : -9007199254740993, "huge" : 123456789012345678901234567890, "list" : [ 18446744073709551616 , -0 , 0 ] },"meta":{"id":"m-1","queue":"q","lang":"java","schema_version":1,"created_at":1},"attempts":0}`},
	{"float_literals", `{"job":"urn:babel:num:floats","trace_id":"t-1","data":{ "one" : 1.0, "big" : 1e21, "negzero" : -0.0, "upper" : 1E+2, "tenth" : 0.10, "tiny" : 1.5e-7, "huge_exp" : 1.0e400, "neg" : -2.50E-3 },"meta":{"id":"m-1","queue":"q","lang":"python","schema_version":1,"created_at":1},"attempts":0}`},
	{"nested_unknown_keys", `{
  "x_before" : { "a" : [ 1 , { "b" : "caf\u00e9" } ], "n" : 1.0 },
  "job" : "urn:babel:orders:created",
  "trace_id" : "t-1",
  "data" : { },
  "meta" : {
    "id" : "m-1",
    "tenant" : { "id" : "t\/1", "tags" : [ "a" , "\u003cb\u003e" ] },
    "queue" : "orders",
    "lang" : "php",
    "schema_version" : 1,
    "created_at" : 1,
    "\u00fcber" : null
  },
  "attempts" : 0,
  "x_after" : [ true , false , null , 1e21 ],
  "urn" : "urn:babel:also:kept"
}`},
	{"deep_nesting", `{"job":"urn:babel:deep:nest","trace_id":"t-1","data":` + deepPretty(40) + `,"meta":{"id":"m-1","queue":"q","lang":"go","schema_version":1,"created_at":1},"attempts":0}`},
	{"deeper_than_the_scanner", `{"job":"urn:babel:deep:nest","trace_id":"t-1","data":` + deepPretty(jsoncodec.MaxScanDepth+5) + `,"meta":{"id":"m-1","queue":"q","lang":"go","schema_version":1,"created_at":1},"attempts":0}`},
}

func TestReencodeGolden(t *testing.T) {
	g := newGoldenDir(t, filepath.Join("testdata", "encode", "reencode"), ".json")
	for _, tc := range reencodeCases {
		g.run(tc.name, func(t *testing.T, golden string) {
			env := mustDecode(t, tc.body)
			if err := env.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			out := mustEncode(t, env)
			assertGolden(t, golden, out)
			checkCanonicalReencode(t, []byte(tc.body), out)
			// The string path agrees with the byte path.
			fromString, err := decodeString(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if again := mustEncode(t, fromString); !bytes.Equal(again, out) {
				t.Errorf("decodeString+Encode\n got: %s\nwant: %s", again, out)
			}
			for _, esc := range []string{`\/`, `\u00`, `\ud`, `\u2028`, `\u003c`} {
				if esc == `\u00` {
					continue // control characters keep \u00xx
				}
				if bytes.Contains(out, []byte(esc)) {
					t.Errorf("the re-encode holds %s: %s", esc, out)
				}
			}
			if !utf8.Valid(out) {
				t.Errorf("the re-encode is not valid UTF-8")
			}
		})
	}
	g.assertNoOrphans()
}

// Data that the caller assigns, on a built or a decoded envelope, is written
// canonically by Encode and by the library's own writers (publish, DLQ).
func TestEncodeCanonicalisesAssignedData(t *testing.T) {
	const pretty = "{\n  \"s\" : \"caf\\u00e9 \\/\",\n  \"n\" : 1.0\n}"
	const want = `{"s":"café /","n":1.0}`
	for _, env := range []*Envelope{fixedEnvelope(t, "urn:a:b", nil), mustDecode(t, contractExample)} {
		env.Data = json.RawMessage(pretty)
		out := mustEncode(t, env)
		if !bytes.Contains(out, []byte(`"data":`+want+`,`)) {
			t.Errorf("Encode: %s", out)
		}
		msg := mustMessage(t, env)
		if body, _ := msg.Value.(string); body != string(out) {
			t.Errorf("NewMessage body %s, want %s", body, out)
		}
		dlq := deadLetterEnvelope(env, &DeadLetter{Reason: ReasonFailed, Lang: Lang}, msg, "q")
		if body, _ := dlq.Value.(string); !strings.Contains(body, `"data":`+want+`,`) {
			t.Errorf("DLQ body %s", body)
		}
	}
	// Data that is not one JSON object is refused, not written.
	for _, bad := range []string{`{"a":}`, `{"a":1} {}`, `[1]`, "{\"a\":\"\xff\"}"} {
		env := fixedEnvelope(t, "urn:a:b", nil)
		env.Data = json.RawMessage(bad)
		if b, err := env.Encode(); !errors.Is(err, ErrInvalidEnvelope) {
			t.Errorf("Encode with data %q: %s, %v; want ErrInvalidEnvelope", bad, b, err)
		}
	}
}

// A publish of a struct holding a json.RawMessage with escapes, and of a
// raw message, comes out canonical too.
func TestPublishDataIsCanonical(t *testing.T) {
	type withRaw struct {
		Raw json.RawMessage `json:"raw"`
		S   string          `json:"s"`
	}
	for _, tc := range []struct {
		data any
		want string
	}{
		{withRaw{Raw: json.RawMessage(`{ "a" : "caf\u00e9\/" }`), S: "<&>\u2028"}, "{\"raw\":{\"a\":\"café/\"},\"s\":\"<&>\u2028\"}"},
		{json.RawMessage("{\n \"x\" : [ 1.0 , 1e21 , \"\\u00e9\" ]\n}"), `{"x":[1.0,1e21,"é"]}`},
		{map[string]string{"bad": "a\xffb"}, "{\"bad\":\"a\ufffdb\"}"},
	} {
		env, err := NewEnvelope("urn:a:b", tc.data)
		if err != nil {
			t.Fatal(err)
		}
		if string(env.Data) != tc.want {
			t.Errorf("Data %s, want %s", env.Data, tc.want)
		}
	}
}

// Invalid UTF-8 set on an envelope by hand still encodes to valid JSON.
func TestEncodeInvalidUTF8FieldsIsValidJSON(t *testing.T) {
	env := fixedEnvelope(t, "urn:a:b", nil)
	env.URN, env.Meta.Queue = "urn:\xff", "q\xfe"
	b := mustEncode(t, env)
	if !json.Valid(b) || !utf8.Valid(b) || !bytes.Contains(b, []byte("\"urn:\ufffd\"")) {
		t.Errorf("Encode with invalid UTF-8 fields: %q", b)
	}
}
