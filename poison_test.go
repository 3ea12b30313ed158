package artemis

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/Azure/go-amqp"
)

// poisonDeadLetter is the fixed block of the poison goldens, shaped as the
// consumer writes it for a poison body: reason poison, the decode error's
// text, no exception.
func poisonDeadLetter() *DeadLetter {
	return &DeadLetter{
		Reason:        ReasonPoison,
		Error:         ptr(`babelqueue: invalid envelope: "test" <cause> & co`),
		FailedAt:      1749132730000,
		OriginalQueue: "orders",
		Attempts:      0,
		Lang:          "go",
	}
}

const poisonBlock = `{"reason":"poison","error":"babelqueue: invalid envelope: \"test\" <cause> & co","exception":null,"failed_at":1749132730000,"original_queue":"orders","attempts":0,"lang":"go"}`

func TestPoisonRecordGolden(t *testing.T) {
	invalidUTF8 := "{\"job\":\"urn:a:b\",\"data\":\"\xff\xfe\xc3\"}"
	dataSection, _, err := readBody(&amqp.Message{Data: [][]byte{[]byte(`{"job":"urn:a:b",`), []byte(`"meta":{"schema_version":2}}`)}})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		body   string
		object bool // a JSON object: the record is the body with the block spliced in
		base64 bool // invalid UTF-8: the record carries the body as base64
	}{
		{name: "object", body: `{"job":"urn:babel:orders:created","trace_id":"t","data":[1],"meta":{"schema_version":2},"attempts":-1}`, object: true},
		{name: "object_empty", body: `{}`, object: true},
		{name: "object_empty_space", body: `{ }`, object: true},
		{name: "object_empty_newlines", body: "{\n\t\n}", object: true},
		{name: "object_trailing_whitespace", body: "{\"a\":1} \t\r\n", object: true},
		{name: "object_trailing_newline", body: "{\"a\":1}\n", object: true},
		{name: "object_leading_whitespace", body: " \n\t{\"a\":1}", object: true},
		{name: "object_pretty", body: "{\n  \"a\": {\"b\": [1, 2]},\n  \"s\": \"caf\\u00e9 }\"\n}\n", object: true},
		{name: "object_unicode", body: `{"name":"café ☕ 日本","html":"<b>&</b>","big":123456789012345678901234567890}`, object: true},
		{name: "object_data_section", body: dataSection, object: true},
		{name: "array", body: `[{"job":"urn:a:b"}]`},
		{name: "number", body: `1042`},
		{name: "string_json", body: `"urn:a:b"`},
		{name: "null_json", body: `null`},
		{name: "plain_text", body: `hello world`},
		{name: "text_special", body: "say \"hi\"\nto <b>me</b> & \\you\t\x00\u2028 café"},
		{name: "object_truncated", body: `{"job":"urn:a:b"`},
		{name: "object_trailing_garbage", body: `{"a":1} x`},
		{name: "object_bom", body: "\xef\xbb\xbf{\"a\":1}"},
		{name: "invalid_utf8", body: invalidUTF8, base64: true},
		{name: "invalid_utf8_only", body: "\xff", base64: true},
		{name: "empty_body", body: ``},
		{name: "whitespace_body", body: " \n"},
	}
	var names []string
	for _, tt := range tests {
		names = append(names, tt.name)
		t.Run(tt.name, func(t *testing.T) {
			rec := poisonRecord(tt.body, poisonDeadLetter())
			assertGolden(t, filepath.Join("testdata", "poison", tt.name+".json"), rec)

			if !utf8.Valid(rec) || !json.Valid(rec) {
				t.Fatalf("record is not valid UTF-8 JSON: %q", rec)
			}
			var top map[string]json.RawMessage
			if err := json.Unmarshal(rec, &top); err != nil {
				t.Fatalf("record is not an object: %v", err)
			}
			var dl DeadLetter
			if err := json.Unmarshal(top["dead_letter"], &dl); err != nil {
				t.Fatalf("dead_letter: %v", err)
			}
			if dl.Reason != "poison" || dl.Lang != "go" || dl.FailedAt != 1749132730000 || dl.OriginalQueue != "orders" {
				t.Errorf("dead_letter %+v", dl)
			}
			if !bytes.Contains(rec, []byte(`"dead_letter":`+poisonBlock)) {
				t.Errorf("record does not carry the block byte for byte: %s", rec)
			}

			switch {
			case tt.object:
				closing := strings.LastIndexByte(tt.body, '}')
				if !bytes.HasPrefix(rec, []byte(tt.body[:closing])) {
					t.Errorf("the original bytes before the closing brace are not a prefix of the record:\n%q\n%q", rec, tt.body)
				}
				if !bytes.HasSuffix(rec, []byte(tt.body[closing:])) {
					t.Errorf("the closing brace and what follows it are not the record's suffix: %q", rec)
				}
				if _, ok := top["raw"]; ok {
					t.Errorf("an object body got a raw member: %s", rec)
				}
			case tt.base64:
				var raw, enc string
				if err := json.Unmarshal(top["raw"], &raw); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(top["raw_encoding"], &enc); err != nil || enc != "base64" {
					t.Errorf("raw_encoding %s", top["raw_encoding"])
				}
				got, err := base64.StdEncoding.DecodeString(raw)
				if err != nil || string(got) != tt.body {
					t.Errorf("raw %q decodes to %q, %v; want the body %q", raw, got, err, tt.body)
				}
				if len(top) != 3 {
					t.Errorf("members %d, want raw, raw_encoding, dead_letter", len(top))
				}
			default:
				var raw string
				if err := json.Unmarshal(top["raw"], &raw); err != nil || raw != tt.body {
					t.Errorf("raw %s reads back as %q, %v; want the body %q", top["raw"], raw, err, tt.body)
				}
				if !bytes.HasPrefix(rec, []byte(`{"raw":"`)) || len(top) != 2 {
					t.Errorf("record shape: %s", rec)
				}
			}
		})
	}
	assertNoOrphanGoldens(t, filepath.Join("testdata", "poison"), ".json", names)
}

func TestPoisonRecordExactShapes(t *testing.T) {
	// The contract's shapes, spelled out without golden files.
	tests := []struct {
		body string
		want string
	}{
		{`{}`, `{"dead_letter":` + poisonBlock + `}`},
		{`{"a":1}`, `{"a":1,"dead_letter":` + poisonBlock + `}`},
		{"{\"a\":1}\n", `{"a":1,"dead_letter":` + poisonBlock + "}\n"},
		{`[1]`, `{"raw":"[1]","dead_letter":` + poisonBlock + `}`},
		{`a"b`, `{"raw":"a\"b","dead_letter":` + poisonBlock + `}`},
		{"\xff\x00", `{"raw":"/wA=","raw_encoding":"base64","dead_letter":` + poisonBlock + `}`},
		{``, `{"raw":"","dead_letter":` + poisonBlock + `}`},
	}
	for _, tt := range tests {
		if got := poisonRecord(tt.body, poisonDeadLetter()); string(got) != tt.want {
			t.Errorf("poisonRecord(%q)\n got: %s\nwant: %s", tt.body, got, tt.want)
		}
	}
}

func TestObjectBounds(t *testing.T) {
	tests := []struct {
		body    string
		closing int
		empty   bool
		ok      bool
	}{
		{`{}`, 1, true, true},
		{`{ }`, 2, true, true},
		{" {\n} \n", 3, true, true},
		{`{"a":{}}`, 7, false, true},
		{`{"}":"}"} `, 8, false, true},
		{`[]`, 0, false, false},
		{`{`, 0, false, false},
		{``, 0, false, false},
		{`{} {}`, 0, false, false},
		{`"{}"`, 0, false, false},
	}
	for _, tt := range tests {
		closing, empty, ok := objectBounds(tt.body)
		if closing != tt.closing || empty != tt.empty || ok != tt.ok {
			t.Errorf("objectBounds(%q) = %d, %t, %t; want %d, %t, %t", tt.body, closing, empty, ok, tt.closing, tt.empty, tt.ok)
		}
	}
}

func TestNewDeadLetter(t *testing.T) {
	at := fixedClock
	dl := newDeadLetter(ReasonFailed, &OutcomeError{State: &amqp.StateReleased{}}, "orders", 3, at)
	got := string(dl.appendJSON(nil))
	want := `{"reason":"failed","error":"babelqueue: broker released the transfer","exception":"*artemis.OutcomeError","failed_at":1749132727250,"original_queue":"orders","attempts":3,"lang":"go"}`
	if got != want {
		t.Errorf("block\n got: %s\nwant: %s", got, want)
	}
	// A panic's exception is "panic: " and the type of the panic value.
	dl = newDeadLetter(ReasonFailed, &PanicError{Value: "boom"}, "orders", 1, at)
	if dl.Exception == nil || *dl.Exception != "panic: string" || dl.Error == nil || *dl.Error != "handler panicked: boom" {
		t.Errorf("panic block: %s", dl.appendJSON(nil))
	}
	dl = newDeadLetter(ReasonUnknownURN, nil, "", 0, at)
	if got := string(dl.appendJSON(nil)); got != `{"reason":"unknown_urn","error":null,"exception":null,"failed_at":1749132727250,"original_queue":"","attempts":0,"lang":"go"}` {
		t.Errorf("nil cause block: %s", got)
	}
}

func TestGateVersion(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]any
		gated bool
		msg   string // part of the gate message
	}{
		{name: "no application properties", props: nil},
		{name: "missing", props: map[string]any{"other": "2"}},
		{name: "nil", props: map[string]any{PropSchemaVersion: nil}},
		{name: "amqp null", props: map[string]any{PropSchemaVersion: amqp.Null{}}},
		{name: "empty string", props: map[string]any{PropSchemaVersion: ""}},
		{name: "ASCII whitespace", props: map[string]any{PropSchemaVersion: "  \t"}},
		{name: "all ASCII whitespace kinds", props: map[string]any{PropSchemaVersion: " \t\n\v\f\r"}},
		{name: "exactly 1", props: map[string]any{PropSchemaVersion: "1"}},
		{name: "leading space", props: map[string]any{PropSchemaVersion: " 1"}, gated: true, msg: `" 1"`},
		{name: "trailing space", props: map[string]any{PropSchemaVersion: "1 "}, gated: true, msg: `"1 "`},
		{name: "2", props: map[string]any{PropSchemaVersion: "2"}, gated: true, msg: `"2"`},
		{name: "1.0", props: map[string]any{PropSchemaVersion: "1.0"}, gated: true, msg: `"1.0"`},
		{name: "01", props: map[string]any{PropSchemaVersion: "01"}, gated: true, msg: `"01"`},
		{name: "non-ASCII space", props: map[string]any{PropSchemaVersion: "\u00a0"}, gated: true, msg: PropSchemaVersion},
		{name: "long value is truncated", props: map[string]any{PropSchemaVersion: strings.Repeat("9", 100)}, gated: true, msg: "..."},
		{name: "int64 1", props: map[string]any{PropSchemaVersion: int64(1)}, gated: true, msg: "int64"},
		{name: "int32 1", props: map[string]any{PropSchemaVersion: int32(1)}, gated: true, msg: "int32"},
		{name: "true", props: map[string]any{PropSchemaVersion: true}, gated: true, msg: "bool"},
		{name: "bytes 1", props: map[string]any{PropSchemaVersion: []byte("1")}, gated: true, msg: "[]uint8"},
		{name: "float64 1", props: map[string]any{PropSchemaVersion: float64(1)}, gated: true, msg: "float64"},
		{name: "symbol 1", props: map[string]any{PropSchemaVersion: amqp.Symbol("1")}, gated: true, msg: "Symbol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := gateVersion(&amqp.Message{ApplicationProperties: tt.props})
			if !tt.gated {
				if err != nil {
					t.Errorf("gated: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("not gated")
			}
			if !strings.Contains(err.Error(), PropSchemaVersion) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("gate message %q does not name %s and %s", err, PropSchemaVersion, tt.msg)
			}
		})
	}
}

func TestPoisonMessage(t *testing.T) {
	src := &amqp.Message{
		Header:                &amqp.MessageHeader{Durable: false, Priority: 7, DeliveryCount: 3},
		Annotations:           amqp.Annotations{AnnotationJMSType: "urn:a:b", AnnotationDeliveryTime: int64(5), AnnotationDeliveryDelay: int64(6)},
		Properties:            &amqp.MessageProperties{MessageID: "m-1", ContentEncoding: ptr("gzip")},
		ApplicationProperties: map[string]any{"traceparent": "tp", PropSchemaVersion: "1"},
		Data:                  [][]byte{[]byte("not json")},
	}
	rec := poisonRecord("not json", poisonDeadLetter())
	msg := poisonMessage(src, rec, "orders")
	if msg.Value != string(rec) || msg.Data != nil || msg.Sequence != nil {
		t.Errorf("body: value %#v data %q", msg.Value, msg.Data)
	}
	if msg.Properties.To == nil || *msg.Properties.To != "orders.dlq" || msg.Properties.MessageID != "m-1" {
		t.Errorf("properties %+v", msg.Properties)
	}
	if msg.Properties.ContentType == nil || *msg.Properties.ContentType != ContentType || msg.Properties.ContentEncoding != nil {
		t.Errorf("content type %v encoding %v", msg.Properties.ContentType, msg.Properties.ContentEncoding)
	}
	if !msg.Header.Durable || msg.Header.Priority != 7 || msg.Header.DeliveryCount != 0 {
		t.Errorf("header %+v", msg.Header)
	}
	if _, ok := msg.Annotations[AnnotationDeliveryTime]; ok || msg.Annotations[AnnotationJMSType] != "urn:a:b" {
		t.Errorf("annotations %v", msg.Annotations)
	}
	if _, ok := msg.Annotations[AnnotationDeliveryDelay]; ok {
		t.Errorf("x-opt-delivery-delay kept: %v", msg.Annotations)
	}
	if msg.ApplicationProperties["traceparent"] != "tp" {
		t.Errorf("application properties %v", msg.ApplicationProperties)
	}
	// The source is untouched.
	if src.Data == nil || *src.Properties.ContentEncoding != "gzip" || src.Properties.To != nil || len(src.Annotations) != 3 {
		t.Errorf("source modified: %+v %+v", src, src.Properties)
	}

	// Without properties the DLQ copy still says what it is.
	bare := poisonMessage(&amqp.Message{Value: int64(1)}, rec, "")
	if bare.Properties == nil || bare.Properties.ContentType == nil || bare.Properties.To != nil || bare.Value != string(rec) {
		t.Errorf("bare: %+v %+v", bare, bare.Properties)
	}
}
