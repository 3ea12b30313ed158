package artemis

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/Azure/go-amqp"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
)

// The fuzz targets. Seeds come from f.Add and from testdata/fuzz/<FuzzName>/.
// Run one with, for example:
//
//	go test -run '^$' -fuzz '^FuzzHandle$' -fuzztime 5m -parallel 1 .

// decodeSeeds are bodies every body-taking target starts from.
var decodeSeeds = []string{
	fuzzEnvelope,
	`{"urn":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":2}`,
	`{"job":"urn:x","trace_id":"t","data":{"n":123456789012345678901234567890,"s":"<a&b>/é\u2028"},"meta":{"id":"i","schema_version":1,"created_at":1,"x":[1,{"y":null}]},"attempts":7,"zz":{"k":"v"},"zz":1}`,
	`{"job":"urn:x","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0,"dead_letter":{"reason":"failed","error":null,"exception":null,"failed_at":1,"original_queue":"q","attempts":3,"lang":"go"}}`,
	` { "job" : "urn:x" , "trace_id" : "t" , "data" : { "a" : [ 1 , 2 ] } , "meta" : { "schema_version" : 1 } , "attempts" : 0 } `,
	`{"job":"\u0075rn:\ud800x","trace_id":"\t t","data":{},"meta":{"schema_version":1,"\u0069d":"e"},"attempts":0}`,
	`{"job":null,"urn":"urn:x","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`,
	`{"job":"urn:x","job":"urn:y","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`,
	`{"job":"urn:x","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":-1}`,
	`{"job":"urn:x","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":1e400}`,
	`{"job":"urn:x","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":9223372036854775807}`,
	`{"job":"urn:x","trace_id":"t","data":{},"meta":{"schema_version":"1"},"attempts":0}`,
	"\xef\xbb\xbf" + fuzzEnvelope,
	fuzzEnvelope + "x",
	"{}", "null", "", "[]", `"text"`, "\xff\xfe{", "{\"a\":\"\xff\"}",
	strings.Repeat("[", 64) + strings.Repeat("]", 64),
}

// FuzzDecode: Decode, Validate and Encode never panic, and an envelope that
// decodes and validates re-encodes to bytes that decode to the same
// envelope and that are a fixed point of decode+encode.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := Decode(body)
		if err != nil {
			if !errors.Is(err, ErrInvalidEnvelope) {
				t.Fatalf("Decode error does not wrap ErrInvalidEnvelope: %v", err)
			}
			return
		}
		if err := env.Validate(); err != nil {
			if !errors.Is(err, ErrInvalidEnvelope) {
				t.Fatalf("Validate error does not wrap ErrInvalidEnvelope: %v", err)
			}
			return
		}
		first, err := env.Encode()
		if err != nil {
			t.Fatalf("Encode of a valid envelope failed: %v", err)
		}
		if !utf8.Valid(first) || !json.Valid(first) {
			t.Fatalf("Encode wrote invalid JSON or UTF-8: %q", first)
		}
		again, err := Decode(first)
		if err != nil {
			t.Fatalf("the encoded envelope does not decode: %v\n%s", err, first)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("the encoded envelope does not validate: %v\n%s", err, first)
		}
		if again.URN != env.URN || again.TraceID != env.TraceID || again.Attempts != env.Attempts {
			t.Fatalf("identity changed: job %q->%q trace %q->%q attempts %d->%d",
				env.URN, again.URN, env.TraceID, again.TraceID, env.Attempts, again.Attempts)
		}
		if !bytes.Equal(again.Data, env.Data) {
			t.Fatalf("data changed: %q -> %q", env.Data, again.Data)
		}
		if !reflect.DeepEqual(again.Meta, env.Meta) {
			t.Fatalf("meta changed: %+v -> %+v", env.Meta, again.Meta)
		}
		second, err := again.Encode()
		if err != nil {
			t.Fatalf("second Encode failed: %v", err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("encoding is not idempotent:\n%s\n%s", first, second)
		}
	})
}

// fuzzValue builds an AMQP value of the type kind selects from payload: every
// type go-amqp decodes in application properties and annotations, and the
// ones a caller can put there by hand (amqp.Null, amqp.Symbol).
func fuzzValue(kind byte, p []byte) any {
	var n uint64
	if len(p) > 0 {
		var b [8]byte
		copy(b[:], p)
		n = binary.BigEndian.Uint64(b[:])
	}
	switch kind % 26 {
	case 0:
		return string(p)
	case 1:
		return nil
	case 2:
		return amqp.Null{}
	case 3:
		return n&1 == 1
	case 4:
		return int8(n)
	case 5:
		return int16(n)
	case 6:
		return int32(n)
	case 7:
		return int64(n)
	case 8:
		return uint8(n)
	case 9:
		return uint16(n)
	case 10:
		return uint32(n)
	case 11:
		return n
	case 12:
		return math.Float32frombits(uint32(n))
	case 13:
		return math.Float64frombits(n)
	case 14:
		return time.UnixMilli(int64(n))
	case 15:
		var u amqp.UUID
		copy(u[:], p)
		return u
	case 16:
		return append([]byte{}, p...)
	case 17:
		return []any{string(p), int64(n)}
	case 18:
		return map[string]any{"v": string(p)}
	case 19:
		return map[any]any{int64(n): string(p)}
	case 20:
		return amqp.Symbol(p)
	case 21:
		return []string{string(p)}
	case 22:
		// Only the characters the gate counts as ASCII whitespace, so the
		// blank case is easy to reach.
		b := make([]byte, len(p))
		for i, c := range p {
			b[i] = " \t\n\v\f\r"[int(c)%6]
		}
		return string(b)
	case 23:
		return "1"
	case 24:
		return []byte("1")
	}
	return int64(1)
}

// gatePasses is the contract's section 6 gate, written from the text: a
// missing or null property, a string that is empty or only ASCII whitespace,
// or exactly the string "1".
func gatePasses(v any, present bool) bool {
	switch s := v.(type) {
	case nil, amqp.Null:
		return true
	case string:
		return s == "1" || strings.Trim(s, " \t\n\v\f\r") == ""
	}
	return !present
}

// fuzzBody puts body into the section kind selects.
func fuzzBody(msg *amqp.Message, kind byte, split uint16, body []byte) {
	switch kind % 7 {
	case 0:
		msg.Value = string(body)
	case 1:
		msg.Value = append([]byte{}, body...)
	case 2:
		msg.Data = [][]byte{append([]byte{}, body...)}
	case 3:
		at := int(split) % (len(body) + 1)
		msg.Data = [][]byte{append([]byte{}, body[:at]...), append([]byte{}, body[at:]...)}
	case 4:
		msg.Sequence = [][]any{{string(body)}}
	case 5:
		msg.Value = int64(len(body))
	case 6:
		// no body section
	}
}

// FuzzGate: gateVersion never panics and agrees with the contract, and a
// gated message goes to the DLQ with its body byte for byte in the same
// section kind.
func FuzzGate(f *testing.F) {
	for k := 0; k < 26; k++ {
		f.Add(uint8(k), []byte("1"), uint8(0), []byte(fuzzEnvelope))
	}
	f.Add(uint8(0), []byte(" 1"), uint8(1), []byte(fuzzEnvelope))
	f.Add(uint8(0), []byte("1\n"), uint8(2), []byte("\xff"))
	f.Add(uint8(0), []byte("\u00a0"), uint8(3), []byte(fuzzEnvelope))
	f.Add(uint8(0), []byte("2"), uint8(4), []byte("x"))
	f.Add(uint8(22), []byte("abc"), uint8(5), []byte{})
	f.Add(uint8(255), []byte{}, uint8(6), []byte{})
	f.Fuzz(func(t *testing.T, kind uint8, payload []byte, bodyKind uint8, body []byte) {
		msg := &amqp.Message{Header: &amqp.MessageHeader{}, ApplicationProperties: map[string]any{"traceparent": "00-x"}}
		present := kind != 255
		var v any
		if present {
			v = fuzzValue(kind, payload)
			msg.ApplicationProperties[PropSchemaVersion] = v
		}
		fuzzBody(msg, bodyKind, uint16(len(payload)), body)
		want := gatePasses(v, present)
		gerr := gateVersion(msg)
		if (gerr == nil) != want {
			t.Fatalf("gateVersion(%#v) = %v, the contract says pass=%t", v, gerr, want)
		}

		dlq := &fakelink.Sender{}
		rec := newRecorder()
		var called atomic.Int32
		c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
			called.Add(1)
			return nil
		}}, WithDeadLetterSender(dlq), WithOnError(rec.onError), WithDeadLetterRetryDelay(0))
		r := fakelink.NewReceiver(t, "orders")
		r.Track(msg)
		_ = c.Handle(context.Background(), r, msg)
		disp, ok := r.Disposition(msg)
		if !ok {
			t.Fatal("not settled")
		}
		gated := false
		for _, rp := range rec.all() {
			if errors.Is(rp.err, ErrVersionGated) {
				gated = true
			}
		}
		if gated != (gerr != nil) {
			t.Fatalf("reported gated=%t, gateVersion said %v", gated, gerr)
		}
		if gerr == nil {
			return
		}
		if called.Load() != 0 {
			t.Fatal("a gated message reached the handler")
		}
		if disp != fakelink.Accepted {
			t.Fatalf("gated message settled %v, want accepted after the DLQ copy", disp)
		}
		kept := dlq.Kept()
		if len(kept) != 1 {
			t.Fatalf("%d DLQ copies, want 1", len(kept))
		}
		fwd := kept[0]
		if !sameBody(msg, fwd) {
			t.Fatalf("forwarded body differs: value %#v data %q seq %#v, want value %#v data %q seq %#v",
				fwd.Value, fwd.Data, fwd.Sequence, msg.Value, msg.Data, msg.Sequence)
		}
		if !strings.Contains(rec.all()[0].err.Error(), PropSchemaVersion) {
			t.Fatalf("the gate error does not name the property: %v", rec.all()[0].err)
		}
	})
}

// sameBody reports whether b carries a's body byte for byte in the same
// section kind.
func sameBody(a, b *amqp.Message) bool {
	if reflect.TypeOf(a.Value) != reflect.TypeOf(b.Value) || !reflect.DeepEqual(a.Value, b.Value) {
		return false
	}
	if len(a.Data) != len(b.Data) {
		return false
	}
	for i := range a.Data {
		if !bytes.Equal(a.Data[i], b.Data[i]) {
			return false
		}
	}
	return reflect.DeepEqual(a.Sequence, b.Sequence)
}

// checkPoisonRecord asserts the section 6 shape of the poison record made
// for body.
func checkPoisonRecord(t *testing.T, body string, record []byte) {
	t.Helper()
	if !json.Valid(record) {
		t.Fatalf("the poison record is not valid JSON: %q", record)
	}
	// A body object may itself hold raw, raw_encoding or dead_letter keys of
	// any type; the record's own dead_letter is the last key, which json takes.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(record, &fields); err != nil {
		t.Fatalf("the poison record is not an object: %v: %q", err, record)
	}
	var dl DeadLetter
	if err := json.Unmarshal(fields["dead_letter"], &dl); err != nil || dl.Reason != ReasonPoison {
		t.Fatalf("dead_letter.reason is %q (%v), want poison: %q", dl.Reason, err, record)
	}
	type rawFields struct {
		Raw         *string `json:"raw"`
		RawEncoding *string `json:"raw_encoding"`
	}
	var got rawFields
	if !utf8.ValidString(body) || !isObjectText(body) {
		if err := json.Unmarshal(record, &got); err != nil {
			t.Fatalf("raw fields: %v: %q", err, record)
		}
	}
	switch {
	case !utf8.ValidString(body):
		if got.Raw == nil || got.RawEncoding == nil || *got.RawEncoding != "base64" {
			t.Fatalf("invalid UTF-8 body: want raw with raw_encoding base64: %q", record)
		}
		if *got.Raw != base64.StdEncoding.EncodeToString([]byte(body)) {
			t.Fatalf("raw is not the standard base64 of the body: %q", record)
		}
	case isObjectText(body):
		closing := strings.LastIndexByte(body, '}')
		if !bytes.HasPrefix(record, []byte(body[:closing])) {
			t.Fatalf("the record does not start with the object's bytes:\nbody   %q\nrecord %q", body, record)
		}
		if !bytes.HasSuffix(record, []byte(body[closing:])) {
			t.Fatalf("the record does not end with the object's closing bytes:\nbody   %q\nrecord %q", body, record)
		}
	default:
		if got.Raw == nil || got.RawEncoding != nil {
			t.Fatalf("text body: want raw without raw_encoding: %q", record)
		}
		if *got.Raw != body {
			t.Fatalf("raw does not decode back to the body: %q != %q", *got.Raw, body)
		}
	}
}

// isObjectText reports whether s is one JSON object, whitespace around it
// allowed, as encoding/json reads it.
func isObjectText(s string) bool {
	t := strings.TrimLeft(s, " \t\n\r")
	return strings.HasPrefix(t, "{") && json.Valid([]byte(s))
}

// FuzzPoisonRecord: the poison record of any body is valid JSON with reason
// poison and keeps the body as section 6 says.
func FuzzPoisonRecord(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{ }`))
	f.Add([]byte("{\"raw\":1,\"dead_letter\":{\"reason\":\"failed\"}}\n\t"))
	f.Add([]byte("\x00\x1f\"\\\u2028</script>"))
	f.Fuzz(func(t *testing.T, body []byte) {
		errText := "cause: " + string(body)
		dl := &DeadLetter{Reason: ReasonPoison, Error: &errText, FailedAt: 1, OriginalQueue: string(body), Attempts: 1, Lang: Lang}
		checkPoisonRecord(t, string(body), poisonRecord(string(body), dl))
	})
}

// FuzzHandle: whatever arrives, Handle does not panic, settles the delivery
// exactly once, never accepts a source whose required DLQ write failed, and
// settles as the contract's sections 3 to 6 say.
func FuzzHandle(f *testing.F) {
	add := func(body string, bodyKind uint8, annKind uint8, ann string, props []byte, dc uint32, behaviour, strategy, dlqMode, maxTries uint8) {
		f.Add([]byte(body), bodyKind, uint16(7), annKind, []byte(ann), props, dc, behaviour, strategy, dlqMode, maxTries)
	}
	for i, s := range decodeSeeds {
		add(s, uint8(i), 255, "", nil, uint32(i), uint8(i), uint8(i), uint8(i), uint8(i))
	}
	for dlqMode := uint8(0); dlqMode < 9; dlqMode++ {
		for behaviour := uint8(0); behaviour < 5; behaviour++ {
			add(fuzzEnvelope, 0, 0, urnCreated, nil, 2, behaviour, 0, dlqMode, 2)
		}
		add(fuzzEnvelope, 2, 0, "urn:babel:unknown", nil, 0, 0, 3, dlqMode, 2)
		add("not json", 1, 255, "", []byte{0, 0, 1, '2'}, 0, 0, 0, dlqMode, 2)
	}
	add(fuzzEnvelope, 3, 6, "\x01\x02", []byte{1, 7, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, math.MaxUint32, 1, 0, 1, 3)
	add(fuzzEnvelope, 0, 16, urnCreated, []byte{0, 0, 0}, 0, 0, 0, 1, 3)
	// A body attempts of math.MaxInt with a failing handler: at the limit,
	// not retried through an overflowing attempts+1.
	add(decodeSeeds[10], 0, 255, "", nil, 0, 1, 0, 0, 2)
	add(decodeSeeds[10], 0, 255, "", nil, 0, 2, 0, 1, 2)
	f.Fuzz(func(t *testing.T, body []byte, bodyKind uint8, split uint16, annKind uint8, ann []byte,
		props []byte, dc uint32, behaviour, strategy, dlqMode, maxTries uint8) {
		msg := &amqp.Message{Header: &amqp.MessageHeader{DeliveryCount: dc}}
		fuzzBody(msg, bodyKind, split, body)
		if annKind != 255 {
			msg.Annotations = amqp.Annotations{AnnotationJMSType: fuzzValue(annKind, ann)}
		}
		msg.ApplicationProperties = fuzzProperties(props)

		strategies := []UnknownURNStrategy{UnknownURNFail, UnknownURNRelease, UnknownURNDelete, UnknownURNDeadLetter}
		strategyName := strategies[int(strategy)%len(strategies)]
		tries := 1 + int(maxTries)%5
		var calls atomic.Int32
		var seenAttempts atomic.Int64
		h := func(_ context.Context, env *Envelope, _ *amqp.Message) error {
			calls.Add(1)
			seenAttempts.Store(int64(env.Attempts))
			switch behaviour % 5 {
			case 1:
				return errors.New("handler error")
			case 2:
				panic("handler panic")
			case 3:
				panic(errors.New("handler panic with an error"))
			case 4:
				panic(nil)
			}
			return nil
		}
		rec := newRecorder()
		opts := []ConsumerOption{WithOnError(rec.onError), WithUnknownURN(strategyName), WithMaxTries(tries),
			WithDeadLetterRetryDelay(0), WithDeadLetterTimeout(5 * time.Millisecond)}
		var dlq *fakelink.Sender
		mode := int(dlqMode) % 9
		if mode > 0 {
			outcomes := []func(context.Context, *amqp.Message) (amqp.DeliveryState, error){
				fakelink.Accept, fakelink.Reject, fakelink.Release, fakelink.Modify, fakelink.Closed, fakelink.Hang,
				fakelink.Accept, fakelink.Reject}
			dlq = &fakelink.Sender{Outcome: outcomes[mode-1]}
			if mode >= 7 {
				// A Sender without outcomes: only a failed Send is seen, so
				// only accept and reject are modelled (released and modified
				// look like success through Send, as documented).
				opts = append(opts, WithDeadLetterSender(fakelink.PlainSender{S: dlq}))
			} else {
				opts = append(opts, WithDeadLetterSender(dlq))
			}
		}
		c := mustConsumer(t, Handlers{urnCreated: h, "urn:x": h}, opts...)
		r := fakelink.NewReceiver(t, "orders")
		r.Track(msg)

		var ret error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("Handle panicked: %v", p)
				}
			}()
			ret = c.Handle(context.Background(), r, msg)
		}()
		disp, ok := r.Disposition(msg)
		if !ok {
			t.Fatal("Handle returned without settling the delivery")
		}

		var sent, kept []*amqp.Message
		if dlq != nil {
			sent, kept = dlq.Sent(), dlq.Kept()
		}
		if len(sent) > 1 {
			t.Fatalf("%d DLQ writes for one delivery", len(sent))
		}
		reports := rec.all()
		kinds := make([]error, 0, len(reports))
		for _, rp := range reports {
			var de *DeliveryError
			if !errors.As(rp.err, &de) {
				t.Fatalf("reported error is not a *DeliveryError: %v", rp.err)
			}
			kinds = append(kinds, de.Kind.Err())
		}
		// Nothing lost: a source is accepted only after a confirmed copy,
		// and a failed copy means a plain release.
		if len(sent) == 1 && len(kept) == 0 {
			if disp != fakelink.Released {
				t.Fatalf("DLQ write failed but the source was settled %v", disp)
			}
			if len(kinds) == 0 || !errors.Is(kinds[0], ErrDeadLetterFailed) {
				t.Fatalf("DLQ write failed, reported %v", kinds)
			}
		}
		if disp == fakelink.Released && (len(sent) != 1 || len(kept) != 0) {
			t.Fatalf("released without a failed DLQ write (sent %d, kept %d)", len(sent), len(kept))
		}
		if len(kept) == 1 && disp != fakelink.Accepted {
			t.Fatalf("DLQ copy confirmed but the source was settled %v", disp)
		}
		if disp == fakelink.Accepted && len(reports) == 0 && ret != nil {
			t.Fatalf("accepted silently but Handle returned %v", ret)
		}

		// The model of sections 3 to 6.
		want := expectHandle(msg, strategyName, c.handlers, tries, behaviour%5, dlq != nil)
		if got := calls.Load(); got != int32(want.calls) {
			t.Fatalf("handler called %d times, want %d (case %s)", got, want.calls, want.name)
		}
		if want.calls == 1 && seenAttempts.Load() != int64(want.attempts) {
			t.Fatalf("handler saw attempts %d, want %d", seenAttempts.Load(), want.attempts)
		}
		if len(sent) == 0 {
			if want.dlq {
				t.Fatalf("case %s: no DLQ write", want.name)
			}
			if disp != want.disp {
				t.Fatalf("case %s: settled %v, want %v", want.name, disp, want.disp)
			}
			if want.kind == nil && len(kinds) != 0 || want.kind != nil && (len(kinds) != 1 || !errors.Is(kinds[0], want.kind)) {
				t.Fatalf("case %s: reported %v, want %v", want.name, kinds, want.kind)
			}
			return
		}
		if !want.dlq {
			t.Fatalf("case %s: unexpected DLQ write", want.name)
		}
		if len(kept) == 1 && (len(kinds) != 1 || !errors.Is(kinds[0], want.kind)) {
			t.Fatalf("case %s: reported %v, want %v", want.name, kinds, want.kind)
		}
		w := sent[0]
		switch want.reason {
		case "":
			if !sameBody(msg, w) {
				t.Fatalf("gated message not forwarded byte for byte")
			}
		case ReasonPoison:
			s, ok := w.Value.(string)
			if !ok {
				t.Fatalf("poison record is a %T, want an AMQP string", w.Value)
			}
			if !json.Valid([]byte(s)) {
				t.Fatalf("poison record is not valid JSON: %q", s)
			}
			var rec struct {
				DeadLetter DeadLetter `json:"dead_letter"`
			}
			if err := json.Unmarshal([]byte(s), &rec); err != nil || rec.DeadLetter.Reason != ReasonPoison {
				t.Fatalf("poison record reason %q (%v): %q", rec.DeadLetter.Reason, err, s)
			}
			if rec.DeadLetter.Attempts != want.attempts {
				t.Fatalf("poison record attempts %d, want %d", rec.DeadLetter.Attempts, want.attempts)
			}
		default:
			env := dlqEnvelope(t, w)
			if env.DeadLetter.Reason != want.reason || env.DeadLetter.Attempts != want.attempts || env.Attempts != want.attempts {
				t.Fatalf("DLQ copy: reason %q attempts %d/%d, want %q %d", env.DeadLetter.Reason,
					env.DeadLetter.Attempts, env.Attempts, want.reason, want.attempts)
			}
		}
	})
}

// fuzzProperties reads application properties from b: repeated records of a
// key selector, a value kind, a payload length and the payload.
func fuzzProperties(b []byte) map[string]any {
	keys := []string{PropSchemaVersion, PropAttempts, PropSourceLang, PropAppID, "traceparent", "", " ", PropDuplicateID}
	props := map[string]any{}
	for len(b) >= 3 {
		sel, kind, n := b[0], b[1], int(b[2])
		b = b[3:]
		if n > len(b) {
			n = len(b)
		}
		payload := b[:n]
		b = b[n:]
		key := string(payload)
		if int(sel) < len(keys) {
			key = keys[sel]
		}
		props[key] = fuzzValue(kind, payload)
	}
	return props
}

// handleCase is what the model says Handle does with one delivery.
type handleCase struct {
	name     string
	calls    int
	attempts int
	dlq      bool   // a DLQ write is due
	reason   string // its dead_letter reason ("" for a gated forward)
	disp     fakelink.Disposition
	kind     error
}

// expectHandle is the contract's consumer, written from the text of
// sections 3 to 6 and independent of handle.go's control flow.
func expectHandle(msg *amqp.Message, strategyName UnknownURNStrategy, handlers Handlers, tries int, behaviour uint8, hasDLQ bool) handleCase {
	v, present := msg.ApplicationProperties[PropSchemaVersion]
	dc := int(msg.Header.DeliveryCount)
	toDLQ := func(name, reason string, attempts int, kind error) handleCase {
		if !hasDLQ || strategyName == UnknownURNDelete && !errors.Is(kind, ErrUnknownURN) && !errors.Is(kind, ErrHandlerFailed) {
			return handleCase{name: name + "/dropped", attempts: attempts, disp: fakelink.Accepted, kind: kind}
		}
		return handleCase{name: name + "/dlq", attempts: attempts, dlq: true, reason: reason, disp: fakelink.Accepted, kind: kind}
	}
	if !gatePasses(v, present) {
		return toDLQ("gated", "", 0, ErrVersionGated)
	}
	urn := ""
	if s, ok := msg.Annotations[AnnotationJMSType].(string); ok && strings.TrimSpace(s) != "" {
		urn = s
	}
	unknown := func(attempts int) handleCase {
		switch strategyName {
		case UnknownURNRelease:
			return handleCase{name: "unknown/release", attempts: attempts, disp: fakelink.Failed}
		case UnknownURNDelete:
			return handleCase{name: "unknown/delete", attempts: attempts, disp: fakelink.Accepted}
		case UnknownURNDeadLetter:
			return toDLQ("unknown", ReasonUnknownURN, attempts, ErrUnknownURN)
		}
		return handleCase{name: "unknown/fail", attempts: attempts, disp: fakelink.Failed, kind: ErrUnknownURN}
	}
	if urn != "" && handlers[urn] == nil && strategyName != UnknownURNDeadLetter {
		return unknown(0)
	}
	var body []byte
	readable := true
	switch b := msg.Value.(type) {
	case string:
		body = []byte(b)
	case []byte:
		body = b
	case nil:
		if len(msg.Data) == 0 {
			readable = false
		}
		for _, d := range msg.Data {
			body = append(body, d...)
		}
	default:
		readable = false
	}
	var env *Envelope
	err := errNoBody
	if readable {
		env, err = Decode(body)
		if err == nil {
			err = env.Validate()
		}
	}
	if err != nil {
		return toDLQ("poison", ReasonPoison, dc, ErrPoison)
	}
	attempts := env.Attempts
	if dc > attempts {
		attempts = dc
	}
	if urn == "" {
		urn = env.URN
	}
	if handlers[urn] == nil {
		return unknown(attempts)
	}
	if behaviour == 0 {
		return handleCase{name: "handled", calls: 1, attempts: attempts, disp: fakelink.Accepted}
	}
	if attempts < tries-1 { // attempts+1 < maxTries, without overflowing at math.MaxInt
		return handleCase{name: "failed/retry", calls: 1, attempts: attempts, disp: fakelink.Failed, kind: ErrHandlerFailed}
	}
	c := toDLQ("failed", ReasonFailed, attempts, ErrHandlerFailed)
	c.calls = 1
	return c
}

// FuzzCanonicalReencode: for any body that Decode takes, the re-encode is
// canonical (an independent writer over encoding/json's tokens reproduces
// it), idempotent (Encode(Decode(Encode(Decode(x)))) == Encode(Decode(x)))
// and JSON-equivalent to the input where it carries the input's values
// (data, the unknown members at the top level and in meta), with identical
// number literals.
func FuzzCanonicalReencode(f *testing.F) {
	for _, tc := range reencodeCases {
		if len(tc.body) < 4096 {
			f.Add([]byte(tc.body))
		}
	}
	for _, tc := range loadConformance(f).Cases {
		f.Add(readConformanceFile(f, tc.File))
	}
	f.Add([]byte(contractExample))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := Decode(body)
		if err != nil {
			return
		}
		out, err := env.Encode()
		if err != nil {
			// Decode does not validate: data may be an array, a string...
			if !errors.Is(err, ErrInvalidEnvelope) || jsoncodec.IsObject(env.Data) {
				t.Fatalf("Encode after Decode: %v (data %s)", err, env.Data)
			}
			return
		}
		checkCanonicalReencode(t, body, out)
	})
}
