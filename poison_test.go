package artemis

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// poisonDeadLetter is the fixed block of the poison goldens, shaped as the
// consumer writes it for a poison body: reason poison, the decode error's
// text, no exception.
func poisonDeadLetter() *DeadLetter {
	return &DeadLetter{
		Reason:        ReasonPoison,
		Error:         ptr(`artemis: invalid envelope: "test" <cause> & co`),
		FailedAt:      1749132730000,
		OriginalQueue: "orders",
		Attempts:      0,
		Lang:          "go",
	}
}

const poisonBlock = `{"reason":"poison","error":"artemis: invalid envelope: \"test\" <cause> & co","exception":null,"failed_at":1749132730000,"original_queue":"orders","attempts":0,"lang":"go"}`

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
	g := newGoldenDir(t, filepath.Join("testdata", "poison"), ".json")
	for _, tt := range tests {
		g.run(tt.name, func(t *testing.T, golden string) {
			rec := poisonRecord(tt.body, poisonDeadLetter())
			assertGolden(t, golden, rec)

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
	g.assertNoOrphans()
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

// The TestHostile* tests are named hostile inputs, each through
// Consumer.Handle with fake links and an error-callback recorder. Each
// asserts the disposition, the reported error (errors.Is) and that nothing
// is lost: the source is accepted only after its handler returned nil or a
// DLQ copy was confirmed.

func TestPoisonThroughHandle(t *testing.T) {
	bodies := []struct {
		name   string
		msg    *amqp.Message
		prefix string // the record starts with this
	}{
		{"not json", rawMessage("hello <world>"), `{"raw":"hello <world>","dead_letter":{"reason":"poison"`},
		{"json array", rawMessage(`[1,2]`), `{"raw":"[1,2]","dead_letter":`},
		{"object that is not an envelope", rawMessage(`{"a":1}`), `{"a":1,"dead_letter":{"reason":"poison"`},
		{"empty object", rawMessage(`{}`), `{"dead_letter":{"reason":"poison"`},
		{"schema version 2 in the body", rawMessage(`{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"schema_version":2},"attempts":0}`),
			`{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"schema_version":2},"attempts":0,"dead_letter":`},
		{"invalid utf-8", &amqp.Message{Value: []byte{0xff, 0xfe, 'x'}}, `{"raw":"//54","raw_encoding":"base64","dead_letter":`},
		{"empty body", &amqp.Message{}, `{"raw":"","dead_letter":`},
		{"empty data section", &amqp.Message{Data: [][]byte{{}}}, `{"raw":"","dead_letter":`},
		{"sequence body", &amqp.Message{Sequence: [][]any{{"x"}}}, `{"raw":"[[x]]","dead_letter":`},
		{"int value", &amqp.Message{Value: int64(5)}, `{"raw":"5","dead_letter":`},
		{"null job", rawMessage(`{"job":null,"trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`), `{"job":null`},
	}
	for _, b := range bodies {
		t.Run(b.name, func(t *testing.T) {
			rec := newRecorder()
			dlq := &fakelink.Sender{}
			c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
				t.Error("a poison message reached a handler")
				return nil
			}}, WithOnError(rec.onError), WithDeadLetterSender(dlq))
			got := handleOne(t, c, rec, dlq, b.msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			require.Len(t, got.reports, 1)
			assert.ErrorIs(t, got.reports[0].err, ErrPoison)
			require.Len(t, got.dlq, 1)
			rec0 := got.dlq[0].Value.(string)
			assert.True(t, strings.HasPrefix(rec0, b.prefix), "record %s", rec0)
			var parsed struct {
				DeadLetter DeadLetter `json:"dead_letter"`
			}
			require.NoError(t, json.Unmarshal([]byte(rec0), &parsed))
			assert.Equal(t, ReasonPoison, parsed.DeadLetter.Reason)
			assert.Equal(t, "orders", parsed.DeadLetter.OriginalQueue)
			assert.NotNil(t, parsed.DeadLetter.Error)
			assert.Nil(t, parsed.DeadLetter.Exception)
		})
	}
	t.Run("delete strategy drops poison, reported", func(t *testing.T) {
		rec := newRecorder()
		dlq := &fakelink.Sender{}
		c := mustConsumer(t, Handlers{}, WithOnError(rec.onError), WithDeadLetterSender(dlq), WithUnknownURN(UnknownURNDelete))
		got := handleOne(t, c, rec, dlq, rawMessage("nope"))
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Empty(t, got.dlq)
		require.Len(t, got.reports, 1)
		assert.ErrorIs(t, got.reports[0].err, ErrPoison)
	})
	t.Run("no DLQ sender drops poison, reported", func(t *testing.T) {
		rec := newRecorder()
		c := mustConsumer(t, Handlers{}, WithOnError(rec.onError))
		got := handleOne(t, c, rec, nil, rawMessage("nope"))
		assert.Equal(t, fakelink.Accepted, got.disp)
		require.Len(t, got.reports, 1)
		var de *DeliveryError
		require.ErrorAs(t, got.reports[0].err, &de)
		assert.Equal(t, DispositionDropped, de.Disposition)
	})
	t.Run("poison is never retried, whatever the delivery count", func(t *testing.T) {
		m := rawMessage("nope")
		m.Header.DeliveryCount = 0
		dlq := &fakelink.Sender{}
		c := mustConsumer(t, Handlers{}, WithDeadLetterSender(dlq), WithMaxTries(10))
		got := handleOne(t, c, newRecorder(), dlq, m)
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Len(t, got.dlq, 1)
	})
}

func TestHostileTenMegabyteBodies(t *testing.T) {
	big := strings.Repeat("a", 10<<20)

	t.Run("valid envelope with a 10 MB string in data: handled", func(t *testing.T) {
		for _, kind := range []string{"string value", "data section"} {
			t.Run(kind, func(t *testing.T) {
				body := envelopeBody(`{"blob":"` + big + `"}`)
				msg := rawMessage(body)
				if kind == "data section" {
					msg = &amqp.Message{Header: &amqp.MessageHeader{}, Data: [][]byte{[]byte(body)}}
				}
				var blob string
				c, rec, dlq := hostileConsumer(t, func(_ context.Context, env *Envelope, _ *amqp.Message) error {
					var d struct{ Blob string }
					if err := env.Bind(&d); err != nil {
						return err
					}
					blob = d.Blob
					return nil
				})
				got := handleOne(t, c, rec, dlq, msg)
				assert.Equal(t, fakelink.Accepted, got.disp)
				assert.Empty(t, got.reports)
				assert.NoError(t, got.ret)
				assert.Empty(t, got.dlq)
				assert.Equal(t, len(big), len(blob))
				assert.True(t, blob == big, "the 10 MB string arrives intact")
			})
		}
	})

	t.Run("10 MB of non-JSON: poison record with the body as raw", func(t *testing.T) {
		body := "x" + big
		c, rec, dlq := hostileConsumer(t, neverCalled(t))
		got := handleOne(t, c, rec, dlq, rawMessage(body))
		record, de := requirePoisonRecord(t, got)
		assert.ErrorIs(t, de, ErrInvalidEnvelope)
		assert.Contains(t, de.Error(), "not valid JSON")
		assert.True(t, rawOf(t, record) == body, "raw holds the 10 MB body exactly")
	})
}

func TestHostileDeepNesting(t *testing.T) {
	const depth = 100_000
	arrays := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	objects := strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
	for _, tc := range []struct{ name, body string }{
		{"arrays in data", envelopeBody(`{"a":` + arrays + `}`)},
		{"objects in data", envelopeBody(`{"a":` + objects + `}`)},
		{"arrays as the whole body", arrays},
		{"objects as the whole body", objects},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rec, dlq := hostileConsumer(t, neverCalled(t))
			got := handleOne(t, c, rec, dlq, rawMessage(tc.body))
			record, de := requirePoisonRecord(t, got)
			assert.ErrorIs(t, de, ErrInvalidEnvelope)
			assert.Contains(t, de.Error(), "nested more than 10000 levels deep", "a clear error")
			// encoding/json cannot read it, so the record keeps it as text.
			assert.True(t, rawOf(t, record) == tc.body, "raw holds the body exactly")
		})
	}
}

func TestHostileDuplicateKeys(t *testing.T) {
	poison := []struct{ name, body, want string }{
		{"duplicate job", strings.Replace(fuzzEnvelope, `"job":"urn:babel:orders:created"`,
			`"job":"urn:babel:orders:created","job":"urn:babel:orders:paid"`, 1), `duplicate key "job"`},
		{"duplicate job, one spelled with an escape", strings.Replace(fuzzEnvelope, `"job":"urn:babel:orders:created"`,
			`"job":"urn:babel:orders:created","\u006aob":"urn:babel:orders:paid"`, 1), `duplicate key "\u006aob"`},
		{"duplicate trace_id", strings.Replace(fuzzEnvelope, `"attempts":0`, `"attempts":0,"trace_id":"other"`, 1), `duplicate key "trace_id"`},
		{"duplicate meta.id", strings.Replace(fuzzEnvelope, `"queue":"orders"`, `"queue":"orders","id":"x"`, 1), "duplicate key meta.id"},
	}
	for _, tc := range poison {
		t.Run(tc.name+": poison", func(t *testing.T) {
			c, rec, dlq := hostileConsumer(t, neverCalled(t))
			got := handleOne(t, c, rec, dlq, rawMessage(tc.body))
			record, de := requirePoisonRecord(t, got)
			assert.Contains(t, de.Error(), tc.want)
			assert.True(t, strings.HasPrefix(record, tc.body[:len(tc.body)-1]), "the object's bytes are kept")
		})
	}

	t.Run("duplicate unknown keys: handled, and kept in the DLQ copy", func(t *testing.T) {
		body := strings.Replace(fuzzEnvelope, `"created_at":1749132727000`, `"created_at":1749132727000,"x":1,"x":2`, 1)
		body = strings.Replace(body, `"attempts":0`, `"attempts":0,"ext":"a","ext":{"b":[1]}`, 1)
		var handled bool
		c, rec, dlq := hostileConsumer(t, func(context.Context, *Envelope, *amqp.Message) error {
			handled = true
			return nil
		})
		got := handleOne(t, c, rec, dlq, rawMessage(body))
		assert.True(t, handled)
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Empty(t, got.reports)

		// At the limit the DLQ copy carries every duplicate, in order.
		cause := errors.New("boom")
		c, rec, dlq = hostileConsumer(t, failing(cause))
		msg := rawMessage(body)
		msg.Header.DeliveryCount = 2
		got = handleOne(t, c, rec, dlq, msg)
		de := requireReport(t, got, ErrHandlerFailed, DispositionDeadLettered)
		assert.ErrorIs(t, de, cause)
		assert.Equal(t, fakelink.Accepted, got.disp)
		require.Len(t, got.dlq, 1)
		copyBody := got.dlq[0].Value.(string)
		assert.Contains(t, copyBody, `"created_at":1749132727000,"x":1,"x":2}`)
		assert.Contains(t, copyBody, `"attempts":2,"ext":"a","ext":{"b":[1]},"dead_letter":`)
	})
}

func TestHostileBOMBeforeTheObject(t *testing.T) {
	body := "\xef\xbb\xbf" + fuzzEnvelope
	for name, msg := range map[string]*amqp.Message{
		"string value": rawMessage(body),
		"data section": {Header: &amqp.MessageHeader{}, Data: [][]byte{[]byte(body)}},
	} {
		t.Run(name, func(t *testing.T) {
			c, rec, dlq := hostileConsumer(t, neverCalled(t))
			got := handleOne(t, c, rec, dlq, msg)
			record, de := requirePoisonRecord(t, got)
			assert.ErrorIs(t, de, ErrInvalidEnvelope)
			assert.Contains(t, de.Error(), "byte order mark", "the error says why")
			// The BOM makes it text, not an object: kept whole as raw.
			assert.True(t, rawOf(t, record) == body)
		})
	}
}

func TestHostileNotOneObject(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"trailing garbage", fuzzEnvelope + "garbage", "after top-level value"},
		{"a second object", fuzzEnvelope + `{"job":"urn:x"}`, "after top-level value"},
		{"a stray closing bracket", fuzzEnvelope + " ]", "after top-level value"},
		{"null", "null", "JSON but not an object"},
		{"an array of envelopes", "[" + fuzzEnvelope + "]", "JSON but not an object"},
		{"a JSON string", strconv.Quote(fuzzEnvelope), "JSON but not an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rec, dlq := hostileConsumer(t, neverCalled(t))
			got := handleOne(t, c, rec, dlq, rawMessage(tc.body))
			record, de := requirePoisonRecord(t, got)
			assert.ErrorIs(t, de, ErrInvalidEnvelope)
			assert.Contains(t, de.Error(), tc.want)
			assert.Equal(t, tc.body, rawOf(t, record))
		})
	}
}

func TestHostileEmptyBodies(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  *amqp.Message
		want string
	}{
		{"an empty data section", &amqp.Message{Header: &amqp.MessageHeader{}, Data: [][]byte{{}}}, "unexpected end of JSON input"},
		{"two empty data sections", &amqp.Message{Header: &amqp.MessageHeader{}, Data: [][]byte{{}, nil}}, "unexpected end of JSON input"},
		{"an empty string value", rawMessage(""), "unexpected end of JSON input"},
		{"an empty binary value", &amqp.Message{Header: &amqp.MessageHeader{}, Value: []byte{}}, "unexpected end of JSON input"},
		{"no body section", &amqp.Message{Header: &amqp.MessageHeader{}}, "no body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rec, dlq := hostileConsumer(t, neverCalled(t))
			got := handleOne(t, c, rec, dlq, tc.msg)
			record, de := requirePoisonRecord(t, got)
			assert.Contains(t, de.Error(), tc.want)
			assert.Equal(t, "", rawOf(t, record))
		})
	}
}

func TestHostileWhitespaceAroundASmallObject(t *testing.T) {
	pad := strings.Repeat(" \n\t\r", 1<<20) // 4 MB each side, 8 MB in all
	body := pad + fuzzEnvelope + pad

	t.Run("handled normally", func(t *testing.T) {
		var got0 *Envelope
		c, rec, dlq := hostileConsumer(t, func(_ context.Context, env *Envelope, _ *amqp.Message) error {
			got0 = env
			return nil
		})
		got := handleOne(t, c, rec, dlq, rawMessage(body))
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Empty(t, got.reports)
		require.NotNil(t, got0)
		assert.Equal(t, urnCreated, got0.URN)
		assert.JSONEq(t, `{"order_id":1042}`, string(got0.Data))
	})

	t.Run("its DLQ copy is the canonical envelope, without the padding", func(t *testing.T) {
		c, rec, dlq := hostileConsumer(t, failing(errors.New("x")), WithMaxTries(1))
		got := handleOne(t, c, rec, dlq, rawMessage(body))
		_ = requireReport(t, got, ErrHandlerFailed, DispositionDeadLettered)
		assert.Equal(t, fakelink.Accepted, got.disp)
		require.Len(t, got.dlq, 1)
		copyBody := got.dlq[0].Value.(string)
		assert.True(t, strings.HasPrefix(copyBody, fuzzEnvelope[:len(fuzzEnvelope)-1]+`,"dead_letter":`), copyBody)
		assert.Less(t, len(copyBody), 1024)
	})

	t.Run("the same padding around a non-envelope object: poison record keeps it", func(t *testing.T) {
		obj := pad + `{"hello":"world"}` + pad
		c, rec, dlq := hostileConsumer(t, neverCalled(t))
		got := handleOne(t, c, rec, dlq, rawMessage(obj))
		record, _ := requirePoisonRecord(t, got)
		closing := strings.LastIndexByte(obj, '}')
		assert.True(t, strings.HasPrefix(record, obj[:closing]+`,"dead_letter":`))
		assert.True(t, strings.HasSuffix(record, obj[closing:]))
	})
}

// poisonTextCases: each poison body and the error text it gets, which lands
// in dead_letter.error: the contract's words for what is wrong first, the
// detail after them.
var poisonTextCases = []struct {
	name, body, text string
}{
	{"plain_text", `hello world`,
		"the body is not valid JSON: at byte 1: invalid character 'h' looking for beginning of value"},
	{"bad_literal", `{"job":tru}`,
		"the body is not valid JSON: at byte 11: invalid character '}' in literal true (expecting 'e')"},
	{"truncated", `{"job":"urn:a:b"`,
		"the body is not valid JSON: at byte 16: unexpected end of JSON input (the body ends too early)"},
	{"trailing_garbage", `{"a":1} x`,
		"the body is not valid JSON: at byte 9: invalid character 'x' after top-level value"},
	{"empty", ``,
		"the body is not valid JSON: it is empty: unexpected end of JSON input"},
	{"whitespace", " \n",
		"the body is not valid JSON: it holds only whitespace: unexpected end of JSON input"},
	{"bom", "\xef\xbb\xbf{\"a\":1}",
		"the body is not valid JSON: at byte 1: it starts with a UTF-8 byte order mark (EF BB BF), which JSON text must not carry"},
	{"deep", strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		"the body is not valid JSON: at byte 10001: arrays and objects are nested more than 10000 levels deep"},
	{"invalid_utf8", "{\"job\":\"urn:a:\xffb\"}",
		"the body is not valid UTF-8: at byte 15"},
	{"array", `[{"job":"urn:a:b"}]`, "the body is JSON but not an object: it is an array"},
	{"string", `"urn:a:b"`, "the body is JSON but not an object: it is a string"},
	{"number", `1042`, "the body is JSON but not an object: it is a number"},
	{"null", `null`, "the body is JSON but not an object: it is null"},
	{"schema_version_2", envelopeWith("meta", metaWith(`2`)), "meta.schema_version is 2, want 1"},
	{"schema_version_string", envelopeWith("meta", metaWith(`"1"`)), `meta.schema_version is "1", want 1`},
	{"schema_version_float", envelopeWith("meta", metaWith(`1.0`)), "meta.schema_version is 1.0, want 1"},
	{"schema_version_missing", envelopeWith("meta", `{"id":"m","queue":"q","lang":"go","created_at":1}`), "meta.schema_version is missing, want 1"},
	{"meta_missing", envelopeWith("meta", ``), "meta is not an object: it is missing"},
	{"meta_array", envelopeWith("meta", `[1]`), "meta is not an object: it is [1]"},
	{"urn_missing", envelopeWith("job", ``), "the URN (job, else urn) is missing or blank"},
	{"urn_blank", envelopeWith("job", `"  "`), "the URN (job, else urn) is missing or blank"},
	{"urn_number", envelopeWith("job", `42`), "the URN (job, else urn) is not a string: job is 42"},
	{"data_missing", envelopeWith("data", ``), "data is not an object: it is missing"},
	{"data_array", envelopeWith("data", `[1,2]`), "data is not an object: it is [1,2]"},
	{"data_null", envelopeWith("data", `null`), "data is not an object: it is null"},
	{"attempts_negative", envelopeWith("attempts", `-1`), "attempts is not an integer >= 0: it is -1"},
	{"attempts_fraction", envelopeWith("attempts", `1.5`), "attempts is not an integer >= 0: it is 1.5"},
	{"attempts_missing", envelopeWith("attempts", ``), "attempts is not an integer >= 0: it is missing"},
	{"trace_id_missing", envelopeWith("trace_id", ``), "trace_id is missing or blank"},
	{"trace_id_blank", envelopeWith("trace_id", `" "`), "trace_id is missing or blank"},
	{"trace_id_number", envelopeWith("trace_id", `7`), "trace_id is not a string: 7"},
	{"duplicate_job", strings.Replace(contractExample, `"attempts":0`, `"attempts":0,"job":"urn:x:y"`, 1),
		`the body is JSON but not an envelope: duplicate key "job"`},
	{"duplicate_meta_id", strings.Replace(contractExample, `"schema_version":1`, `"schema_version":1,"id":"x"`, 1),
		"the body is JSON but not an envelope: duplicate key meta.id"},
}

// poisonCause is what the consumer finds wrong with a body: Decode's error,
// else Validate's.
func poisonCause(body string) error {
	env, err := decodeString(body)
	if err == nil {
		err = env.Validate()
	}
	return err
}

func TestPoisonTexts(t *testing.T) {
	g := newGoldenDir(t, filepath.Join("testdata", "poison", "errors"), ".json")
	for _, tc := range poisonTextCases {
		g.run(tc.name, func(t *testing.T, golden string) {
			err := poisonCause(tc.body)
			if !errors.Is(err, ErrInvalidEnvelope) {
				t.Fatalf("error %v does not wrap ErrInvalidEnvelope", err)
			}
			want := ErrInvalidEnvelope.Error() + ": " + tc.text
			if err.Error() != want {
				t.Errorf("error\n got: %s\nwant: %s", err, want)
			}
			// Decode's own path says the same as the consumer's.
			if _, derr := Decode([]byte(tc.body)); derr != nil && derr.Error() != err.Error() {
				t.Errorf("Decode says %q, decodeString %q", derr, err)
			}
			if tc.name == "deep" {
				return // 20 kB of brackets: the text is pinned above
			}
			// The poison record as the consumer writes it to the DLQ.
			dl := newDeadLetter(ReasonPoison, err, "orders", 0, time.UnixMilli(1749132730000))
			dl.Exception = nil
			assertGolden(t, golden, poisonRecord(tc.body, dl))
		})
	}
	g.assertNoOrphans()
}
