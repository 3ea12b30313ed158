package artemis

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewEnvelopeFields(t *testing.T) {
	before := time.Now().UnixMilli()
	env, err := NewEnvelope("urn:babel:orders:created", map[string]any{"order_id": 1042})
	after := time.Now().UnixMilli()
	if err != nil {
		t.Fatal(err)
	}
	assertUUIDv4(t, "meta.id", env.Meta.ID)
	assertUUIDv4(t, "trace_id", env.TraceID)
	if env.Meta.ID == env.TraceID {
		t.Errorf("meta.id and trace_id are both %q; they must be distinct", env.Meta.ID)
	}
	if env.URN != "urn:babel:orders:created" {
		t.Errorf("URN %q", env.URN)
	}
	if env.Meta.Lang != "go" || env.Meta.SchemaVersion != 1 || env.Attempts != 0 || env.DeadLetter != nil {
		t.Errorf("lang %q schema_version %d attempts %d dead_letter %v, want go 1 0 nil",
			env.Meta.Lang, env.Meta.SchemaVersion, env.Attempts, env.DeadLetter)
	}
	if env.Meta.CreatedAt < before || env.Meta.CreatedAt > after {
		t.Errorf("created_at %d is not Unix ms within [%d, %d]", env.Meta.CreatedAt, before, after)
	}
	if err := env.Validate(); err != nil {
		t.Errorf("a fresh envelope does not validate: %v", err)
	}

	// Every envelope gets its own id and, without a trace id, its own trace.
	other, err := NewEnvelope("urn:babel:orders:created", nil)
	if err != nil {
		t.Fatal(err)
	}
	if other.Meta.ID == env.Meta.ID || other.TraceID == env.TraceID {
		t.Errorf("two envelopes share an id or a trace id: %q/%q and %q/%q",
			env.Meta.ID, env.TraceID, other.Meta.ID, other.TraceID)
	}
}

func TestNewEnvelopeOptions(t *testing.T) {
	at := time.Date(2025, 6, 5, 14, 12, 7, 999_999_999, time.FixedZone("CEST", 2*3600))
	env, err := NewEnvelope("  urn:babel:orders:created\t", nil, EnvelopeQueue("orders"), EnvelopeCreatedAt(at))
	if err != nil {
		t.Fatal(err)
	}
	if env.URN != "urn:babel:orders:created" {
		t.Errorf("URN %q, want the URN trimmed", env.URN)
	}
	if env.Meta.Queue != "orders" {
		t.Errorf("meta.queue %q", env.Meta.Queue)
	}
	// Unix ms is zone independent and truncates the sub-millisecond part.
	if want := int64(1749125527999); env.Meta.CreatedAt != want {
		t.Errorf("created_at %d, want %d", env.Meta.CreatedAt, want)
	}
}

func TestNewEnvelopeTraceID(t *testing.T) {
	tests := []struct {
		name string
		opts []EnvelopeOption
		want string // "" means a fresh UUID v4 is minted
	}{
		{name: "missing"},
		{name: "empty", opts: []EnvelopeOption{EnvelopeTraceID("")}},
		{name: "whitespace only", opts: []EnvelopeOption{EnvelopeTraceID(" \t\n ")}},
		{name: "given", opts: []EnvelopeOption{EnvelopeTraceID(contractTraceID)}, want: contractTraceID},
		{name: "given with spaces is trimmed", opts: []EnvelopeOption{EnvelopeTraceID("  " + contractTraceID + "\n")}, want: contractTraceID},
		{name: "not a UUID is reused as is", opts: []EnvelopeOption{EnvelopeTraceID("trace-from-php")}, want: "trace-from-php"},
		{name: "last option wins", opts: []EnvelopeOption{EnvelopeTraceID("first"), EnvelopeTraceID("second")}, want: "second"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := NewEnvelope("urn:babel:t:e", nil, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				assertUUIDv4(t, "minted trace_id", env.TraceID)
			} else if env.TraceID != tt.want {
				t.Errorf("trace_id %q, want %q", env.TraceID, tt.want)
			}
			if env.TraceID == env.Meta.ID {
				t.Errorf("trace_id equals meta.id %q", env.TraceID)
			}
		})
	}
}

func TestNewEnvelopeRejects(t *testing.T) {
	tests := []struct {
		name    string
		urn     string
		data    any
		opts    []EnvelopeOption
		wantMsg string
	}{
		{name: "empty URN", urn: "", wantMsg: "URN"},
		{name: "space URN", urn: "   ", wantMsg: "URN"},
		{name: "whitespace URN", urn: "\t\r\n ", wantMsg: "URN"},
		{name: "invalid UTF-8 URN", urn: "urn:\xff", wantMsg: "URN"},
		{name: "invalid UTF-8 trace id", urn: "urn:a:b", opts: []EnvelopeOption{EnvelopeTraceID("t\xfe")}, wantMsg: "trace id"},
		{name: "slice data", urn: "urn:a:b", data: []int{1, 2}, wantMsg: "data"},
		{name: "string data", urn: "urn:a:b", data: "hello", wantMsg: "data"},
		{name: "number data", urn: "urn:a:b", data: 42, wantMsg: "data"},
		{name: "bool data", urn: "urn:a:b", data: true, wantMsg: "data"},
		{name: "raw null data", urn: "urn:a:b", data: json.RawMessage("null"), wantMsg: "data"},
		{name: "raw array data", urn: "urn:a:b", data: json.RawMessage(`[{"a":1}]`), wantMsg: "data"},
		{name: "raw string data", urn: "urn:a:b", data: json.RawMessage(`"{}"`), wantMsg: "data"},
		{name: "raw number data", urn: "urn:a:b", data: json.RawMessage(`12`), wantMsg: "data"},
		{name: "raw invalid JSON", urn: "urn:a:b", data: json.RawMessage(`{"a":}`), wantMsg: "data"},
		{name: "raw trailing garbage", urn: "urn:a:b", data: json.RawMessage(`{"a":1} x`), wantMsg: "data"},
		{name: "raw invalid UTF-8", urn: "urn:a:b", data: json.RawMessage("{\"a\":\"\xff\"}"), wantMsg: "UTF-8"},
		{name: "raw pointer to array", urn: "urn:a:b", data: ptr(json.RawMessage(`[]`)), wantMsg: "data"},
		{name: "unmarshalable data", urn: "urn:a:b", data: map[string]any{"f": func() {}}, wantMsg: "data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := NewEnvelope(tt.urn, tt.data, tt.opts...)
			if err == nil {
				t.Fatalf("NewEnvelope succeeded: %+v", env)
			}
			if env != nil {
				t.Errorf("NewEnvelope returned an envelope with its error")
			}
			if !errors.Is(err, ErrInvalidEnvelope) {
				t.Errorf("error %q does not wrap ErrInvalidEnvelope", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not mention %q", err, tt.wantMsg)
			}
		})
	}
}

func TestNewEnvelopeData(t *testing.T) {
	tests := []struct {
		name string
		data any
		want string
	}{
		{name: "nil", data: nil, want: `{}`},
		{name: "nil raw pointer", data: (*json.RawMessage)(nil), want: `{}`},
		{name: "struct", data: orderCreated{OrderID: 1042, Customer: "ACME"}, want: `{"order_id":1042,"customer":"ACME"}`},
		{name: "struct pointer", data: &orderCreated{OrderID: 7, Tags: []string{"a"}}, want: `{"order_id":7,"customer":"","tags":["a"]}`},
		{name: "map sorted by key", data: map[string]any{"b": 2, "a": 1, "c": map[string]int{"z": 1, "y": 2}}, want: `{"a":1,"b":2,"c":{"y":2,"z":1}}`},
		{name: "empty map", data: map[string]any{}, want: `{}`},
		{name: "raw compact", data: json.RawMessage(`{"order_id":1042}`), want: `{"order_id":1042}`},
		{name: "raw with whitespace is compacted", data: json.RawMessage("  {\n  \"order_id\" : 1042 ,\n  \"note\" : \"a  b\"\n}\n"), want: `{"order_id":1042,"note":"a  b"}`},
		{name: "raw pointer", data: ptr(json.RawMessage(`{ "x" : [ 1 , 2 ] }`)), want: `{"x":[1,2]}`},
		{name: "raw is made canonical and keeps big numbers", data: json.RawMessage(`{"s":"caf\u00e9 \/","n":123456789012345678901234567890}`), want: `{"s":"café /","n":123456789012345678901234567890}`},
		{name: "json.Number keeps digits", data: map[string]any{"n": json.Number("9007199254740993")}, want: `{"n":9007199254740993}`},
		{name: "HTML and separators are not escaped", data: map[string]string{"h": "<a href=\"/x?a=1&b=2\">", "s": "a\u2028b\u2029c"}, want: "{\"h\":\"<a href=\\\"/x?a=1&b=2\\\">\",\"s\":\"a\u2028b\u2029c\"}"},
		{name: "escaped backslash before u003c stays", data: map[string]string{"s": `\u003c`}, want: `{"s":"\\u003c"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := NewEnvelope("urn:a:b", tt.data)
			if err != nil {
				t.Fatal(err)
			}
			if string(env.Data) != tt.want {
				t.Errorf("Data\n got: %s\nwant: %s", env.Data, tt.want)
			}
			if err := env.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

// encodeCases are the canonical encodings pinned in testdata/encode.
func encodeCases(t *testing.T) []struct {
	name string
	env  *Envelope
} {
	unknown := mustDecode(t, `{"x_first":1,"job":"urn:babel:orders:created","trace_id":"`+contractTraceID+`","data":{"order_id":1042},"meta":{"id":"`+contractMessageID+`","queue":"orders","tenant":{"id":"t-1","tags":["a","b"]},"lang":"php","schema_version":1,"created_at":1749132727000,"z_last":null},"attempts":2,"x_after":"<&>"}`)

	controls := fixedEnvelope(t, "urn:babel:ctl:\tjob", map[string]string{
		"ctl": "nul\x00 bell\x07 bs\b ff\f nl\n cr\r tab\t us\x1f del\x7f quote\" backslash\\ slash/",
	})
	controls.Meta.Queue = "q\x01\n"
	controls.TraceID = "trace\"\\id"

	dead := fixedEnvelope(t, "urn:babel:orders:created", json.RawMessage(`{"order_id":1042}`))
	dead.Attempts = 3
	dead.DeadLetter = &DeadLetter{
		Reason:        ReasonFailed,
		Error:         ptr("Payment gateway timeout"),
		Exception:     ptr("*app.GatewayError"),
		FailedAt:      1749132730000,
		OriginalQueue: "orders",
		Attempts:      3,
		Lang:          "go",
	}
	deadNulls := fixedEnvelope(t, "urn:babel:orders:created", nil)
	deadNulls.DeadLetter = &DeadLetter{Reason: ReasonUnknownURN, FailedAt: 1749132730000, OriginalQueue: "orders.in", Lang: "go"}

	return []struct {
		name string
		env  *Envelope
	}{
		{"contract_order_created", fixedEnvelope(t, "urn:babel:orders:created", map[string]int{"order_id": 1042})},
		{"empty_data", fixedEnvelope(t, "urn:babel:orders:created", nil)},
		{"unicode", fixedEnvelope(t, "urn:babel:cafés:créé", map[string]string{"drink": "café ☕", "city": "日本", "emoji": "😀"})},
		{"html_and_slash", fixedEnvelope(t, "urn:babel:web:page", map[string]string{"html": "<b>Tom & Jerry</b>", "url": "https://example.com/a/b?x=1&y=2", "cmp": "a<b>c"})},
		{"line_separators", fixedEnvelope(t, "urn:babel:text:lines", map[string]string{"text": "a\u2028b\u2029c"})},
		{"control_characters", controls},
		{"big_integers", fixedEnvelope(t, "urn:babel:num:big", json.RawMessage(`{"max_safe_plus_2":9007199254740993,"huge":123456789012345678901234567890,"neg":-9007199254740993,"float":1.0e400}`))},
		{"big_integers_json_number", fixedEnvelope(t, "urn:babel:num:big", map[string]json.Number{"max_safe_plus_2": "9007199254740993", "huge": "123456789012345678901234567890"})},
		{"nested", fixedEnvelope(t, "urn:babel:orders:created", map[string]any{
			"order": map[string]any{
				"id":    1042,
				"lines": []any{map[string]any{"sku": "A-1", "qty": 2}, map[string]any{"sku": "B/2", "qty": 1}},
				"ship":  map[string]any{"to": "Zürich", "express": true, "note": nil},
			},
			"empty_obj": map[string]any{},
			"empty_arr": []any{},
		})},
		{"unknown_keys", unknown},
		{"dead_letter", dead},
		{"dead_letter_nulls", deadNulls},
	}
}

func TestEncodeGolden(t *testing.T) {
	g := newGoldenDir(t, filepath.Join("testdata", "encode"), ".json")
	for _, tc := range encodeCases(t) {
		g.run(tc.name, func(t *testing.T, golden string) {
			got := mustEncode(t, tc.env)
			assertGolden(t, golden, got)

			if !json.Valid(got) {
				t.Fatalf("not valid JSON: %s", got)
			}
			// Canonical means compact: re-compacting changes nothing.
			var compact bytes.Buffer
			if err := json.Compact(&compact, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(compact.Bytes(), got) {
				t.Errorf("not compact:\n got: %s\ncompact: %s", got, compact.Bytes())
			}
			// Nothing HTML-escaped, no \u escape for non-ASCII or the separators.
			for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`, `\u2028`, `\u2029`, `\/`} {
				if bytes.Contains(got, []byte(esc)) {
					t.Errorf("contains the escape %s: %s", esc, got)
				}
			}
			for _, c := range got {
				if c < 0x20 {
					t.Errorf("raw control byte %#x in %s", c, got)
				}
			}
			// Decoding the canonical bytes and encoding again is the identity.
			again := mustEncode(t, mustDecode(t, string(got)))
			if !bytes.Equal(again, got) {
				t.Errorf("Decode+Encode is not the identity\n got: %s\nwant: %s", again, got)
			}
		})
	}
	g.assertNoOrphans()
}

func TestEncodeContractExample(t *testing.T) {
	env := fixedEnvelope(t, "urn:babel:orders:created", map[string]int{"order_id": 1042})
	if got := mustEncode(t, env); string(got) != contractExample {
		t.Errorf("NewEnvelope+Encode\n got: %s\nwant: %s", got, contractExample)
	}
	golden, err := os.ReadFile(filepath.Join("testdata", "encode", "contract_order_created.json"))
	if err != nil {
		t.Fatal(err)
	}
	if string(golden) != contractExample {
		t.Errorf("the golden file is not the contract's example\n got: %s\nwant: %s", golden, contractExample)
	}

	dec := mustDecode(t, contractExample)
	if err := dec.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if dec.URN != "urn:babel:orders:created" || dec.TraceID != contractTraceID || string(dec.Data) != `{"order_id":1042}` ||
		dec.Meta.ID != contractMessageID || dec.Meta.Queue != "orders" || dec.Meta.Lang != "go" ||
		dec.Meta.SchemaVersion != 1 || dec.Meta.CreatedAt != contractCreatedAt || dec.Attempts != 0 || dec.DeadLetter != nil {
		t.Errorf("decoded fields: %+v", dec)
	}
	if got := mustEncode(t, dec); string(got) != contractExample {
		t.Errorf("Decode+Encode\n got: %s\nwant: %s", got, contractExample)
	}
}

// envelopeWith returns a valid envelope's JSON with one top-level member
// replaced (value "" removes it) and extra members appended.
func envelopeWith(key, value string) string {
	members := []struct{ k, v string }{
		{"job", `"urn:babel:orders:created"`},
		{"trace_id", `"` + contractTraceID + `"`},
		{"data", `{"order_id":1042}`},
		{"meta", `{"id":"` + contractMessageID + `","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000}`},
		{"attempts", `0`},
	}
	var b strings.Builder
	b.WriteByte('{')
	first := true
	for _, m := range members {
		v := m.v
		if m.k == key {
			v = value
		}
		if v == "" {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(`"` + m.k + `":` + v)
	}
	b.WriteByte('}')
	return b.String()
}

func metaWith(version string) string {
	return `{"id":"` + contractMessageID + `","queue":"orders","lang":"go","schema_version":` + version + `,"created_at":1749132727000}`
}

func TestValidateRules(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		field string // the error message must name it
	}{
		// a non-blank URN (job, else urn)
		{"job empty", envelopeWith("job", `""`), "URN"},
		{"job blank", envelopeWith("job", `"  \t "`), "URN"},
		{"job null without urn", envelopeWith("job", `null`), "URN"},
		{"job and urn missing", envelopeWith("job", ``), "URN"},
		{"urn blank", strings.Replace(envelopeWith("job", ``), `{`, `{"urn":" ",`, 1), "URN"},
		{"job a number", envelopeWith("job", `42`), "job"},
		{"job an object", envelopeWith("job", `{"urn":"x"}`), "job"},
		// meta an object whose schema_version is exactly the integer 1
		{"meta missing", envelopeWith("meta", ``), "meta"},
		{"meta null", envelopeWith("meta", `null`), "meta"},
		{"meta an array", envelopeWith("meta", `[1]`), "meta"},
		{"meta a string", envelopeWith("meta", `"{}"`), "meta"},
		{"meta empty", envelopeWith("meta", `{}`), "meta.schema_version"},
		{"schema_version missing", envelopeWith("meta", `{"id":"m","queue":"q","lang":"go","created_at":1}`), "meta.schema_version"},
		{"schema_version 2", envelopeWith("meta", metaWith(`2`)), "meta.schema_version"},
		{"schema_version 0", envelopeWith("meta", metaWith(`0`)), "meta.schema_version"},
		{"schema_version -1", envelopeWith("meta", metaWith(`-1`)), "meta.schema_version"},
		{`schema_version "1"`, envelopeWith("meta", metaWith(`"1"`)), "meta.schema_version"},
		{"schema_version 1.0", envelopeWith("meta", metaWith(`1.0`)), "meta.schema_version"},
		{"schema_version 1e0", envelopeWith("meta", metaWith(`1e0`)), "meta.schema_version"},
		{"schema_version true", envelopeWith("meta", metaWith(`true`)), "meta.schema_version"},
		{"schema_version null", envelopeWith("meta", metaWith(`null`)), "meta.schema_version"},
		{"schema_version 2^64+1", envelopeWith("meta", metaWith(`18446744073709551617`)), "meta.schema_version"},
		{"meta.id a number", envelopeWith("meta", `{"id":7,"schema_version":1}`), "meta.id"},
		{"meta.created_at a float", envelopeWith("meta", `{"schema_version":1,"created_at":1.5}`), "meta.created_at"},
		// data an object
		{"data missing", envelopeWith("data", ``), "data"},
		{"data null", envelopeWith("data", `null`), "data"},
		{"data an array", envelopeWith("data", `[{"order_id":1042}]`), "data"},
		{"data a string", envelopeWith("data", `"{}"`), "data"},
		{"data a number", envelopeWith("data", `1042`), "data"},
		// attempts an integer >= 0
		{"attempts missing", envelopeWith("attempts", ``), "attempts"},
		{"attempts null", envelopeWith("attempts", `null`), "attempts"},
		{"attempts -1", envelopeWith("attempts", `-1`), "attempts"},
		{"attempts 1.5", envelopeWith("attempts", `1.5`), "attempts"},
		{"attempts 1.0", envelopeWith("attempts", `1.0`), "attempts"},
		{"attempts 1e400", envelopeWith("attempts", `1e400`), "attempts"},
		{"attempts 2^70", envelopeWith("attempts", `1180591620717411303424`), "attempts"},
		{`attempts "0"`, envelopeWith("attempts", `"0"`), "attempts"},
		{"attempts true", envelopeWith("attempts", `true`), "attempts"},
		{"attempts an object", envelopeWith("attempts", `{}`), "attempts"},
		// trace_id a non-blank string
		{"trace_id missing", envelopeWith("trace_id", ``), "trace_id"},
		{"trace_id empty", envelopeWith("trace_id", `""`), "trace_id"},
		{"trace_id blank", envelopeWith("trace_id", `" \n\t "`), "trace_id"},
		{"trace_id null", envelopeWith("trace_id", `null`), "trace_id"},
		{"trace_id a number", envelopeWith("trace_id", `12345`), "trace_id"},
		{"trace_id an array", envelopeWith("trace_id", `["t"]`), "trace_id"},
		// the dead_letter block, when present, must be an object of the right types
		{"dead_letter a string", strings.TrimSuffix(envelopeWith("", ""), "}") + `,"dead_letter":"x"}`, "dead_letter"},
		{"dead_letter attempts a string", strings.TrimSuffix(envelopeWith("", ""), "}") + `,"dead_letter":{"attempts":"3"}}`, "dead_letter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !json.Valid([]byte(tt.body)) {
				t.Fatalf("test body is not JSON: %s", tt.body)
			}
			env, err := decodeValidate(tt.body)
			if err == nil {
				t.Fatalf("accepted %s as %+v", tt.body, env)
			}
			if !errors.Is(err, ErrInvalidEnvelope) {
				t.Errorf("error %q does not wrap ErrInvalidEnvelope", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name %q", err, tt.field)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"contract example", contractExample},
		{"urn alias", strings.Replace(contractExample, `"job":`, `"urn":`, 1)},
		{"attempts large", envelopeWith("attempts", `9223372036854775807`)},
		{"attempts -0", envelopeWith("attempts", `-0`)},
		{"data with whitespace", envelopeWith("data", "{ \n }")},
		{"meta with only schema_version", envelopeWith("meta", `{"schema_version":1}`)},
		{"meta.created_at null", envelopeWith("meta", `{"schema_version":1,"created_at":null}`)},
		{"trace_id not a UUID", envelopeWith("trace_id", `"abc"`)},
		{"dead_letter present", strings.TrimSuffix(contractExample, "}") + `,"dead_letter":{"reason":"failed","error":null,"exception":null,"failed_at":1,"original_queue":"orders","attempts":0,"lang":"go"}}`},
		{"lang php", strings.Replace(contractExample, `"lang":"go"`, `"lang":"php"`, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeValidate(tt.body); err != nil {
				t.Errorf("rejected %s: %v", tt.body, err)
			}
		})
	}
}

func TestValidateBuiltEnvelope(t *testing.T) {
	valid := func() *Envelope { return fixedEnvelope(t, "urn:a:b", nil) }
	tests := []struct {
		name   string
		mutate func(*Envelope)
		field  string // "" means valid
	}{
		{"fresh", func(*Envelope) {}, ""},
		{"blank job", func(e *Envelope) { e.URN = " " }, "URN"},
		{"schema 2", func(e *Envelope) { e.Meta.SchemaVersion = 2 }, "meta.schema_version"},
		{"nil data", func(e *Envelope) { e.Data = nil }, "data"},
		{"array data", func(e *Envelope) { e.Data = json.RawMessage(`[]`) }, "data"},
		{"negative attempts", func(e *Envelope) { e.Attempts = -3 }, "attempts"},
		{"blank trace", func(e *Envelope) { e.TraceID = "\t" }, "trace_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := valid()
			tt.mutate(env)
			err := env.Validate()
			if tt.field == "" {
				if err != nil {
					t.Errorf("Validate: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidEnvelope) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Validate = %v, want an ErrInvalidEnvelope naming %q", err, tt.field)
			}
		})
	}
}

func TestBind(t *testing.T) {
	env := mustDecode(t, `{"job":"urn:a:b","trace_id":"t","data":{"order_id":1042,"customer":"café","tags":["x","y"],"big":9007199254740993,"huge":123456789012345678901234567890},"meta":{"schema_version":1},"attempts":0}`)

	var order orderCreated
	if err := env.Bind(&order); err != nil {
		t.Fatal(err)
	}
	if order.OrderID != 1042 || order.Customer != "café" || len(order.Tags) != 2 || order.Tags[1] != "y" {
		t.Errorf("struct: %+v", order)
	}

	var big struct {
		Big  int64       `json:"big"`
		Huge json.Number `json:"huge"`
	}
	if err := env.Bind(&big); err != nil {
		t.Fatal(err)
	}
	if big.Big != 9007199254740993 || big.Huge != "123456789012345678901234567890" {
		t.Errorf("big numbers: %+v", big)
	}

	var nums map[string]json.Number
	onlyNumbers := mustDecode(t, `{"job":"urn:a:b","trace_id":"t","data":{"big":9007199254740993,"huge":123456789012345678901234567890,"f":1.50},"meta":{"schema_version":1},"attempts":0}`)
	if err := onlyNumbers.Bind(&nums); err != nil {
		t.Fatal(err)
	}
	want := map[string]json.Number{"big": "9007199254740993", "huge": "123456789012345678901234567890", "f": "1.50"}
	if len(nums) != len(want) {
		t.Errorf("map: %v, want %v", nums, want)
	}
	for k, v := range want {
		if nums[k] != v {
			t.Errorf("map[%q] = %q, want %q", k, nums[k], v)
		}
	}

	var generic map[string]any
	if err := env.Bind(&generic); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(generic))
	for k := range generic {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if strings.Join(keys, ",") != "big,customer,huge,order_id,tags" {
		t.Errorf("map keys %v", keys)
	}

	// A type mismatch is the caller's error, reported as json.Unmarshal does.
	var wrong struct {
		OrderID string `json:"order_id"`
	}
	var typeErr *json.UnmarshalTypeError
	if err := env.Bind(&wrong); !errors.As(err, &typeErr) {
		t.Errorf("Bind into a mismatched struct: %v, want a *json.UnmarshalTypeError", err)
	}

	// An envelope built without data binds as an empty object.
	empty := &Envelope{}
	var m map[string]any
	if err := empty.Bind(&m); err != nil || m == nil || len(m) != 0 {
		t.Errorf("Bind of empty data: %v, %v", m, err)
	}
}

func TestNewEnvelopeNilDataIsAnEmptyObject(t *testing.T) {
	type order struct {
		ID int `json:"id"`
	}
	for name, data := range map[string]any{
		"untyped nil":     nil,
		"nil map":         map[string]any(nil),
		"nil struct ptr":  (*order)(nil),
		"nil raw pointer": (*json.RawMessage)(nil),
	} {
		env, err := NewEnvelope("urn:a:b", data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(env.Data) != "{}" {
			t.Errorf("%s: data %s, want {}", name, env.Data)
		}
	}
}

// useRandom makes the library's ids draw from random (crypto/rand again
// when nil) with empty batches, until the test ends.
func useRandom(t *testing.T, random []byte) {
	t.Helper()
	read := rand.Read
	if random != nil {
		r := bytes.NewReader(random)
		read = func(b []byte) (int, error) { return io.ReadFull(r, b) }
	}
	idRandom, idRandomRead = newRandomSource(), read
	t.Cleanup(func() { idRandom, idRandomRead = newRandomSource(), rand.Read })
}

// TestRandomBatchesServeManyIDs: one read of the system's randomness serves
// randomBatch/32 envelopes with two fresh ids, and every id is distinct.
func TestRandomBatchesServeManyIDs(t *testing.T) {
	var reads int
	idRandom, idRandomRead = newRandomSource(), func(b []byte) (int, error) { reads++; return rand.Read(b) }
	t.Cleanup(func() { idRandom, idRandomRead = newRandomSource(), rand.Read })
	const envelopes = 10 * randomBatch / 32
	seen := make(map[string]bool, 2*envelopes)
	for range envelopes {
		env, err := NewEnvelope(benchURN, nil)
		require.NoError(t, err)
		for _, id := range []string{env.TraceID, env.Meta.ID} {
			require.False(t, seen[id], "a repeated id")
			seen[id] = true
		}
	}
	assert.Equal(t, 10, reads, "reads of crypto/rand for %d envelopes", envelopes)
	t.Logf("%d reads of crypto/rand for %d envelopes with two ids each", reads, envelopes)
}

// TestMintedIDs: meta.id and a minted trace id are distinct UUID v4 strings
// drawn from the library's own batches of randomness (idRandom; the
// process-wide settings of github.com/google/uuid are not used), the trace
// id first, exactly as uuid.NewRandomFromReader over the same bytes would
// make and format them.
func TestMintedIDs(t *testing.T) {
	random := make([]byte, randomBatch)
	for i := range random {
		random[i] = byte(i*37 + 11)
	}
	want := func(r io.Reader) string { return uuid.Must(uuid.NewRandomFromReader(r)).String() }
	src := bytes.NewReader(random)
	wantTrace, wantID := want(src), want(src)

	useRandom(t, random)
	env, err := NewEnvelope(benchURN, nil)
	require.NoError(t, err)
	assert.Equal(t, wantTrace, env.TraceID)
	assert.Equal(t, wantID, env.Meta.ID)

	useRandom(t, random)
	env, err = NewEnvelope(benchURN, nil, EnvelopeTraceID(benchTrace))
	require.NoError(t, err)
	assert.Equal(t, benchTrace, env.TraceID)
	assert.Equal(t, wantTrace, env.Meta.ID, "with a given trace id, meta.id takes the first draw")

	// The process-wide source of github.com/google/uuid is not the
	// library's: a program's uuid.SetRand changes none of its ids.
	uuid.SetRand(bytes.NewReader(random))
	useRandom(t, nil)
	env, err = NewEnvelope(benchURN, nil)
	uuid.SetRand(nil)
	require.NoError(t, err)
	assert.NotEqual(t, wantTrace, env.TraceID)
	assert.NotEqual(t, wantID, env.Meta.ID)

	seen := map[string]bool{}
	for range 100 {
		env, err := NewEnvelope(benchURN, nil)
		require.NoError(t, err)
		for _, id := range []string{env.TraceID, env.Meta.ID} {
			u, err := uuid.Parse(id)
			require.NoError(t, err)
			assert.Equal(t, uuid.Version(4), u.Version())
			assert.Equal(t, uuid.RFC4122, u.Variant())
			assert.Equal(t, u.String(), id)
			assert.False(t, seen[id], "a repeated id")
			seen[id] = true
		}
	}
}

// nestedObject is a JSON object nested depth levels deep ({"a":{...{}}}),
// the object itself the first level.
func nestedObject(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
}

// nestedMap is nestedObject as Go maps.
func nestedMap(depth int) map[string]any {
	m := map[string]any{}
	for i := 1; i < depth; i++ {
		m = map[string]any{"a": m}
	}
	return m
}

// TestDataDepthAgreesWithDecode: data as deep as a decoder reads inside an
// envelope is published and read back; one level deeper is refused by
// NewEnvelope, Encode and NewMessage, never published for a consumer to
// poison.
func TestDataDepthAgreesWithDecode(t *testing.T) {
	const limit = 9999 // encoding/json's 10000 levels, less the envelope's own
	t.Run("at the limit", func(t *testing.T) {
		for name, data := range map[string]any{"raw": json.RawMessage(nestedObject(limit)), "map": nestedMap(limit)} {
			env, err := NewEnvelope(urnCreated, data)
			require.NoError(t, err, name)
			body, err := env.Encode()
			require.NoError(t, err, name)
			_, err = Decode(body)
			require.NoError(t, err, name)
			msg, err := NewMessage(env)
			require.NoError(t, err, name)
			_, err = DecodeMessage(msg)
			require.NoError(t, err, name)
		}
	})
	t.Run("one level deeper", func(t *testing.T) {
		for name, data := range map[string]any{"raw": json.RawMessage(nestedObject(limit + 1)), "map": nestedMap(limit + 1)} {
			_, err := NewEnvelope(urnCreated, data)
			require.ErrorIs(t, err, ErrInvalidEnvelope, name)
			assert.Contains(t, err.Error(), "nested more than 9999 levels deep", name)
		}
		env, err := NewEnvelope(urnCreated, nil, EnvelopeTraceID(testTrace))
		require.NoError(t, err)
		env.Data = json.RawMessage(nestedObject(limit + 1))
		_, err = env.Encode()
		require.ErrorIs(t, err, ErrInvalidEnvelope, "Encode")
		assert.Contains(t, err.Error(), "nested more than 9999 levels deep")
		_, err = NewMessage(env)
		require.ErrorIs(t, err, ErrInvalidEnvelope, "NewMessage")
		assert.Contains(t, err.Error(), "nested more than 9999 levels deep")
	})
}
