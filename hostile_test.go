package artemis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// Named hostile inputs, each through Consumer.Handle with fake links and an
// error-callback recorder. Each asserts the disposition, the reported error
// (errors.Is) and that nothing is lost: the source is accepted only after
// its handler returned nil or a DLQ copy was confirmed.

// hostileConsumer is a consumer on queue "orders" with a confirming DLQ
// sender, the recorder as its error callback and h for urnCreated.
func hostileConsumer(h HandlerFunc, opts ...ConsumerOption) (*Consumer, *recorder, *fakelink.Sender) {
	rec := newRecorder()
	dlq := &fakelink.Sender{}
	all := append([]ConsumerOption{WithOnError(rec.onError), WithDeadLetterSender(dlq), WithQueue("orders")}, opts...)
	return NewConsumer(Handlers{urnCreated: h}, all...), rec, dlq
}

// neverCalled is the handler of tests whose message must not reach one.
func neverCalled(t *testing.T) HandlerFunc {
	return func(context.Context, *Envelope, *amqp.Message) error {
		t.Error("the message reached a handler")
		return nil
	}
}

// requireReport asserts exactly one report, of kind, with disposition disp.
func requireReport(t *testing.T, got outcome, kind error, disp Disposition) *DeliveryError {
	t.Helper()
	require.Len(t, got.reports, 1, "reports: %v", got.reports)
	err := got.reports[0].err
	require.ErrorIs(t, err, kind)
	var de *DeliveryError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, disp, de.Disposition)
	assert.ErrorIs(t, got.ret, kind, "Handle returns what it reported")
	return de
}

// requirePoisonRecord asserts a poison delivery that was dead-lettered:
// reported as ErrPoison, accepted after the copy, the copy a valid JSON
// record with reason poison. It returns the record and the reported error.
func requirePoisonRecord(t *testing.T, got outcome) (string, *DeliveryError) {
	t.Helper()
	de := requireReport(t, got, ErrPoison, DeadLettered)
	assert.Equal(t, fakelink.Accepted, got.disp, "accepted after the confirmed copy")
	require.Len(t, got.dlq, 1, "one confirmed DLQ copy")
	record, ok := got.dlq[0].Value.(string)
	require.True(t, ok, "the record is an AMQP string value, got %T", got.dlq[0].Value)
	require.True(t, json.Valid([]byte(record)), "the record is valid JSON")
	var parsed struct {
		DeadLetter DeadLetter `json:"dead_letter"`
	}
	require.NoError(t, json.Unmarshal([]byte(record), &parsed))
	assert.Equal(t, ReasonPoison, parsed.DeadLetter.Reason)
	require.NotNil(t, parsed.DeadLetter.Error)
	assert.Equal(t, de.Err.Error(), *parsed.DeadLetter.Error, "the record carries the reported cause")
	return record, de
}

// rawOf returns the raw field of a poison record of a non-object body.
func rawOf(t *testing.T, record string) string {
	t.Helper()
	var r struct {
		Raw *string `json:"raw"`
	}
	require.NoError(t, json.Unmarshal([]byte(record), &r))
	require.NotNil(t, r.Raw, "the record has no raw field")
	return *r.Raw
}

// envelopeBody is the contract envelope with data replaced by the given raw
// JSON object.
func envelopeBody(data string) string {
	return strings.Replace(fuzzEnvelope, `{"order_id":1042}`, data, 1)
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
				c, rec, dlq := hostileConsumer(func(_ context.Context, env *Envelope, _ *amqp.Message) error {
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
		c, rec, dlq := hostileConsumer(neverCalled(t))
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
			c, rec, dlq := hostileConsumer(neverCalled(t))
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
			c, rec, dlq := hostileConsumer(neverCalled(t))
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
		c, rec, dlq := hostileConsumer(func(context.Context, *Envelope, *amqp.Message) error {
			handled = true
			return nil
		})
		got := handleOne(t, c, rec, dlq, rawMessage(body))
		assert.True(t, handled)
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Empty(t, got.reports)

		// At the limit the DLQ copy carries every duplicate, in order.
		cause := errors.New("boom")
		c, rec, dlq = hostileConsumer(failing(cause))
		msg := rawMessage(body)
		msg.Header.DeliveryCount = 2
		got = handleOne(t, c, rec, dlq, msg)
		de := requireReport(t, got, ErrHandlerFailed, DeadLettered)
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
			c, rec, dlq := hostileConsumer(neverCalled(t))
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
			c, rec, dlq := hostileConsumer(neverCalled(t))
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
			c, rec, dlq := hostileConsumer(neverCalled(t))
			got := handleOne(t, c, rec, dlq, tc.msg)
			record, de := requirePoisonRecord(t, got)
			assert.Contains(t, de.Error(), tc.want)
			assert.Equal(t, "", rawOf(t, record))
		})
	}
}

func TestHostileNonStringJMSType(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value any
	}{
		{"int", int64(42)},
		{"int32", int32(7)},
		{"binary naming another URN", []byte("urn:babel:orders:paid")},
		{"list naming another URN", []any{"urn:babel:orders:paid"}},
		{"map", map[string]any{"urn": "urn:babel:orders:paid"}},
		{"bool", true},
		{"null", nil},
		{"blank string", "  \t"},
	} {
		t.Run(tc.name+": routed on the body URN", func(t *testing.T) {
			msg := orderMessage(t, 0)
			msg.Annotations[AnnotationJMSType] = tc.value
			var urn string
			rec := newRecorder()
			dlq := &fakelink.Sender{}
			c := NewConsumer(Handlers{
				urnCreated: func(_ context.Context, env *Envelope, _ *amqp.Message) error {
					urn = env.URN()
					return nil
				},
				"urn:babel:orders:paid": neverCalled(t),
			}, WithOnError(rec.onError), WithDeadLetterSender(dlq))
			got := handleOne(t, c, rec, dlq, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			assert.Empty(t, got.reports)
			assert.NoError(t, got.ret)
			assert.Equal(t, urnCreated, urn)
		})
	}
}

func TestHostileMaximalDeliveryCount(t *testing.T) {
	const dc = math.MaxUint32

	t.Run("the handler sees attempts 4294967295", func(t *testing.T) {
		var seen int
		c, rec, dlq := hostileConsumer(func(_ context.Context, env *Envelope, _ *amqp.Message) error {
			seen = env.Attempts
			return nil
		})
		got := handleOne(t, c, rec, dlq, orderMessage(t, dc))
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Empty(t, got.reports)
		assert.Equal(t, 4294967295, seen)
	})

	t.Run("a failure is at the limit: dead-lettered with attempts 4294967295", func(t *testing.T) {
		cause := &gatewayError{"Payment gateway timeout"}
		c, rec, dlq := hostileConsumer(failing(cause))
		got := handleOne(t, c, rec, dlq, orderMessage(t, dc))
		de := requireReport(t, got, ErrHandlerFailed, DeadLettered)
		assert.Equal(t, 4294967295, de.Attempts)
		assert.Equal(t, fakelink.Accepted, got.disp, "accepted after the confirmed copy")
		require.Len(t, got.dlq, 1)
		env := dlqEnvelope(t, got.dlq[0])
		assert.Equal(t, 4294967295, env.Attempts)
		assert.Equal(t, 4294967295, env.DeadLetter.Attempts)
		assert.Equal(t, ReasonFailed, env.DeadLetter.Reason)
		assert.Equal(t, "4294967295", got.dlq[0].ApplicationProperties[PropAttempts])
		assert.Contains(t, got.dlq[0].Value, `"attempts":4294967295,"dead_letter":`)
	})

	t.Run("without a DLQ: dropped, reported with the attempts", func(t *testing.T) {
		rec := newRecorder()
		c := NewConsumer(Handlers{urnCreated: failing(errors.New("x"))}, WithOnError(rec.onError))
		got := handleOne(t, c, rec, nil, orderMessage(t, dc))
		de := requireReport(t, got, ErrHandlerFailed, Dropped)
		assert.Equal(t, 4294967295, de.Attempts)
		assert.Equal(t, fakelink.Accepted, got.disp)
	})

	t.Run("a body attempts of math.MaxInt64 is at the limit, not retried", func(t *testing.T) {
		// attempts+1 overflows here; the library must not read it as below
		// the limit and redeliver forever.
		body := strings.Replace(fuzzEnvelope, `"attempts":0`, `"attempts":9223372036854775807`, 1)
		c, rec, dlq := hostileConsumer(failing(errors.New("x")))
		got := handleOne(t, c, rec, dlq, rawMessage(body))
		de := requireReport(t, got, ErrHandlerFailed, DeadLettered)
		assert.Equal(t, math.MaxInt64, de.Attempts)
		assert.Equal(t, fakelink.Accepted, got.disp)
		require.Len(t, got.dlq, 1)
		assert.Equal(t, math.MaxInt64, dlqEnvelope(t, got.dlq[0]).DeadLetter.Attempts)
	})
}

// wireDecoded returns msg as a peer reads it: marshalled and unmarshalled by
// go-amqp, so each property has the Go type go-amqp decodes it to.
func wireDecoded(t *testing.T, msg *amqp.Message) *amqp.Message {
	t.Helper()
	b, err := msg.MarshalBinary()
	require.NoError(t, err)
	var out amqp.Message
	require.NoError(t, out.UnmarshalBinary(b))
	return &out
}

func TestHostileSchemaVersionOfEveryType(t *testing.T) {
	ts := time.UnixMilli(1749132727000)
	uuid := amqp.UUID{0x7b, 0x3f, 0x9c, 0x2a}
	for _, tc := range []struct {
		name    string
		value   any // what the peer sent
		decoded any // what go-amqp hands the consumer
		gated   bool
	}{
		{"string 1", "1", "1", false},
		{"string 2", "2", "2", true},
		{"string 1 with a space", " 1", " 1", true},
		{"string 1 with a newline", "1\n", "1\n", true},
		{"empty string", "", "", false},
		{"ASCII whitespace", " \t\r\n\v\f", " \t\r\n\v\f", false},
		{"no-break space is not ASCII whitespace", "\u00a0", "\u00a0", true},
		{"symbol 1, read as the string 1", amqp.Symbol("1"), "1", false},
		{"symbol 2, read as the string 2", amqp.Symbol("2"), "2", true},
		{"bool", true, true, true},
		{"int8", int8(1), int8(1), true},
		{"int16", int16(1), int16(1), true},
		{"int32", int32(1), int32(1), true},
		{"int64", int64(1), int64(1), true},
		{"uint8", uint8(1), uint8(1), true},
		{"uint16", uint16(1), uint16(1), true},
		{"uint32", uint32(1), uint32(1), true},
		{"uint64", uint64(1), uint64(1), true},
		{"float32", float32(1), float32(1), true},
		{"float64", float64(1), float64(1), true},
		{"timestamp", ts, ts, true},
		{"uuid", uuid, uuid, true},
		{"binary 1", []byte("1"), []byte("1"), true},
		{"list", []any{"1"}, []any{"1"}, true},
		{"map", map[string]any{"v": "1"}, map[string]any{"v": "1"}, true},
		{"amqp null", amqp.Null{}, nil, false},
		{"nil", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := orderMessage(t, 0)
			sent.ApplicationProperties[PropSchemaVersion] = tc.value
			msg := wireDecoded(t, sent)
			got0, present := msg.ApplicationProperties[PropSchemaVersion]
			require.True(t, present)
			if ts, ok := tc.decoded.(time.Time); ok {
				assert.True(t, ts.Equal(got0.(time.Time)), "decoded %v", got0)
			} else {
				require.Equal(t, tc.decoded, got0, "go-amqp decodes it as %T", got0)
			}

			var handled bool
			c, rec, dlq := hostileConsumer(func(context.Context, *Envelope, *amqp.Message) error {
				handled = true
				return nil
			})
			got := handleOne(t, c, rec, dlq, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			if !tc.gated {
				assert.True(t, handled)
				assert.Empty(t, got.reports)
				assert.Empty(t, got.dlq)
				return
			}
			assert.False(t, handled, "a gated message never reaches a handler")
			de := requireReport(t, got, ErrVersionGated, DeadLettered)
			assert.Contains(t, de.Error(), PropSchemaVersion)
			require.Len(t, got.dlq, 1)
			fwd := got.dlq[0]
			assert.Equal(t, msg.Value, fwd.Value, "forwarded byte for byte")
			assert.Equal(t, got0, fwd.ApplicationProperties[PropSchemaVersion])
			// The forward goes on the wire too: every decodable type encodes.
			_, err := fwd.MarshalBinary()
			assert.NoError(t, err)
		})
	}
}

func TestHostileBodyAttempts(t *testing.T) {
	for _, tc := range []struct{ name, attempts, want string }{
		{"minus one", "-1", "attempts is not an integer >= 0: it is -1"},
		{"1e400", "1e400", "attempts is not an integer >= 0: it is 1e400"},
		{"2^70", "1180591620717411303424", "attempts is not an integer >= 0: it is 1180591620717411303424"},
		{"a fraction", "1.5", "attempts is not an integer >= 0: it is 1.5"},
		{"a string", `"1"`, `attempts is not an integer >= 0: it is "1"`},
		{"null", "null", "attempts is not an integer >= 0: it is null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Replace(fuzzEnvelope, `"attempts":0`, `"attempts":`+tc.attempts, 1)
			c, rec, dlq := hostileConsumer(neverCalled(t))
			msg := rawMessage(body)
			msg.Header.DeliveryCount = 1
			got := handleOne(t, c, rec, dlq, msg)
			record, de := requirePoisonRecord(t, got)
			assert.ErrorIs(t, de, ErrInvalidEnvelope)
			assert.Contains(t, de.Error(), tc.want, "the error names attempts")
			assert.True(t, strings.HasPrefix(record, body[:len(body)-1]+`,"dead_letter":{"reason":"poison"`),
				"the object's bytes are kept and the block spliced in: %s", record)
			assert.Contains(t, record, `"attempts":1,"lang":"go"}}`, "the block has the delivery count")
		})
	}
}

func TestHostileTenThousandApplicationProperties(t *testing.T) {
	const n = 10_000
	headers := make(map[string]string, n)
	for i := range n {
		headers[fmt.Sprintf("x-header-%05d", i)] = fmt.Sprintf("value-%d", i)
	}
	env, err := NewEnvelope(urnCreated, json.RawMessage(`{"order_id":1042}`), EnvelopeTraceID(testTrace))
	require.NoError(t, err)
	sent, err := NewMessage(env, WithHeaders(headers))
	require.NoError(t, err)
	msg := wireDecoded(t, sent)
	require.Len(t, msg.ApplicationProperties, n+4)

	var seen HeaderCarrier
	c, rec, dlq := hostileConsumer(func(ctx context.Context, _ *Envelope, _ *amqp.Message) error {
		seen = HeadersFromContext(ctx)
		return nil
	})
	got := handleOne(t, c, rec, dlq, msg)
	assert.Equal(t, fakelink.Accepted, got.disp)
	assert.Empty(t, got.reports)
	require.Len(t, seen, n+4, "every header plus the four bq_ properties")
	for k, v := range headers {
		if seen[k] != v {
			t.Fatalf("header %s = %q, want %q", k, seen[k], v)
		}
	}
	assert.Equal(t, "1", seen.Get(PropSchemaVersion))
	assert.Equal(t, AppID, seen.Get(PropAppID))
}

func TestHostileWhitespaceAroundASmallObject(t *testing.T) {
	pad := strings.Repeat(" \n\t\r", 1<<20) // 4 MB each side, 8 MB in all
	body := pad + fuzzEnvelope + pad

	t.Run("handled normally", func(t *testing.T) {
		var got0 *Envelope
		c, rec, dlq := hostileConsumer(func(_ context.Context, env *Envelope, _ *amqp.Message) error {
			got0 = env
			return nil
		})
		got := handleOne(t, c, rec, dlq, rawMessage(body))
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Empty(t, got.reports)
		require.NotNil(t, got0)
		assert.Equal(t, urnCreated, got0.Job)
		assert.JSONEq(t, `{"order_id":1042}`, string(got0.Data))
	})

	t.Run("its DLQ copy is the canonical envelope, without the padding", func(t *testing.T) {
		c, rec, dlq := hostileConsumer(failing(errors.New("x")), WithMaxTries(1))
		got := handleOne(t, c, rec, dlq, rawMessage(body))
		_ = requireReport(t, got, ErrHandlerFailed, DeadLettered)
		assert.Equal(t, fakelink.Accepted, got.disp)
		require.Len(t, got.dlq, 1)
		copyBody := got.dlq[0].Value.(string)
		assert.True(t, strings.HasPrefix(copyBody, fuzzEnvelope[:len(fuzzEnvelope)-1]+`,"dead_letter":`), copyBody)
		assert.Less(t, len(copyBody), 1024)
	})

	t.Run("the same padding around a non-envelope object: poison record keeps it", func(t *testing.T) {
		obj := pad + `{"hello":"world"}` + pad
		c, rec, dlq := hostileConsumer(neverCalled(t))
		got := handleOne(t, c, rec, dlq, rawMessage(obj))
		record, _ := requirePoisonRecord(t, got)
		closing := strings.LastIndexByte(obj, '}')
		assert.True(t, strings.HasPrefix(record, obj[:closing]+`,"dead_letter":`))
		assert.True(t, strings.HasSuffix(record, obj[closing:]))
	})
}
