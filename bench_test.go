package artemis

// In-process benchmarks: the envelope codec against the JSON floor every
// publisher pays anyway, Consumer.Handle on an allocation-free fake
// receiver, and Publisher.Publish on a sender that accepts at once.
// BENCHMARKS.md says how to run them and what this machine measured.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/Azure/go-amqp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

const (
	benchURN     = "urn:babel:orders:created"
	benchUnknown = "urn:babel:orders:unknown"
	benchTrace   = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"
	benchQueue   = "orders"
)

// benchOrder is the order-created payload as a publisher's own struct.
type benchOrder struct {
	OrderID  int     `json:"order_id"`
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
	Note     string  `json:"note"`
}

func benchOrderStruct() benchOrder {
	return benchOrder{OrderID: 1042, Amount: 99.9, Currency: "USD", Note: "café ☕"}
}

func benchOrderMap() map[string]any {
	return map[string]any{"order_id": 1042, "amount": 99.9, "currency": "USD", "note": "café ☕"}
}

// Sinks keep the compiler from discarding the work of a benchmark loop.
var (
	benchSinkEnv *Envelope
	benchSinkMap map[string]any
	benchSinkID  string
	benchSinkErr error
)

// benchReceiver is a Receiver that only counts dispositions: no maps, no
// locks, no allocation, so a benchmark measures the consumer and not the fake.
type benchReceiver struct {
	accepted, released, modified, failed int
}

var errBenchReceive = errors.New("benchReceiver: Receive is not used by the benchmarks")

func (r *benchReceiver) Receive(context.Context, *amqp.ReceiveOptions) (*amqp.Message, error) {
	return nil, errBenchReceive
}

func (r *benchReceiver) AcceptMessage(context.Context, *amqp.Message) error {
	r.accepted++
	return nil
}

func (r *benchReceiver) ReleaseMessage(context.Context, *amqp.Message) error {
	r.released++
	return nil
}

func (r *benchReceiver) ModifyMessage(_ context.Context, _ *amqp.Message, o *amqp.ModifyMessageOptions) error {
	r.modified++
	if o != nil && o.DeliveryFailed {
		r.failed++
	}
	return nil
}

func (r *benchReceiver) total() int { return r.accepted + r.released + r.modified }

// benchSender is an OutcomeSender whose broker accepts every transfer at
// once, without allocating.
type benchSender struct{ sent int }

var benchAccepted = &amqp.StateAccepted{}

func (s *benchSender) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	s.sent++
	return nil
}

func (s *benchSender) SendOutcome(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
	s.sent++
	return benchAccepted, nil
}

// --- the codec ---------------------------------------------------------------

// benchRoundTrip is what one message costs in the codec from end to end:
// the publisher makes and encodes it, the consumer decodes and validates it.
func benchRoundTrip(data any) (*Envelope, error) {
	env, err := NewEnvelope(benchURN, data, EnvelopeTraceID(benchTrace), EnvelopeQueue(benchQueue))
	if err != nil {
		return nil, err
	}
	body, err := env.Encode()
	if err != nil {
		return nil, err
	}
	got, err := Decode(body)
	if err != nil {
		return nil, err
	}
	return got, got.Validate()
}

// benchFloorJSON is what any JSON publisher and consumer pay for the same data
// without an envelope: marshal it, unmarshal it into a map.
func benchFloorJSON(data any) (map[string]any, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

func BenchmarkEnvelopeRoundTrip(b *testing.B) {
	for _, tc := range []struct {
		name string
		data any
	}{{"struct", benchOrderStruct()}, {"map", benchOrderMap()}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				env, err := benchRoundTrip(tc.data)
				if err != nil {
					b.Fatal(err)
				}
				benchSinkEnv = env
			}
		})
	}
}

func BenchmarkFloorJSON(b *testing.B) {
	for _, tc := range []struct {
		name string
		data any
	}{{"struct", benchOrderStruct()}, {"map", benchOrderMap()}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m, err := benchFloorJSON(tc.data)
				if err != nil {
					b.Fatal(err)
				}
				benchSinkMap = m
			}
		})
	}
}

// benchBody is the canonical body of the order-created envelope, as a
// consumer receives it.
func benchBody(tb testing.TB) []byte {
	tb.Helper()
	env, err := NewEnvelope(benchURN, benchOrderStruct(), EnvelopeTraceID(benchTrace), EnvelopeQueue(benchQueue),
		EnvelopeCreatedAt(time.UnixMilli(1749132727000)))
	require.NoError(tb, err)
	body, err := env.Encode()
	require.NoError(tb, err)
	return body
}

func benchDecodeValidate(body []byte) (*Envelope, error) {
	env, err := Decode(body)
	if err != nil {
		return nil, err
	}
	return env, env.Validate()
}

func BenchmarkDecodeValidate(b *testing.B) {
	body := benchBody(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		env, err := benchDecodeValidate(body)
		if err != nil {
			b.Fatal(err)
		}
		benchSinkEnv = env
	}
}

// --- the consumer's hot path -------------------------------------------------

// benchDelivery is the order-created message as the broker delivers it on
// its first delivery.
func benchDelivery(tb testing.TB, urn string) *amqp.Message {
	tb.Helper()
	env, err := NewEnvelope(urn, benchOrderStruct(), EnvelopeTraceID(benchTrace), EnvelopeQueue(benchQueue))
	require.NoError(tb, err)
	msg, err := NewMessage(env)
	require.NoError(tb, err)
	return msg
}

func benchAcceptOrder(_ context.Context, env *Envelope, _ *amqp.Message) error {
	if env.Attempts != 0 {
		return errors.New("unexpected attempts")
	}
	return nil
}

func BenchmarkHandleRouted(b *testing.B) {
	c := NewConsumer(Handlers{benchURN: benchAcceptOrder})
	msg := benchDelivery(b, benchURN)
	r := &benchReceiver{}
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if err := c.Handle(ctx, r, msg); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if r.accepted != n || r.total() != n {
		b.Fatalf("%d deliveries: %d accepted, %d settled", n, r.accepted, r.total())
	}
}

// benchPoisonBody would be poison if it were decoded: an unknown-URN message
// routed on its annotation must never get that far.
const benchPoisonBody = `{"job":"urn:babel:orders:unknown","data":[not json`

func BenchmarkHandleUnknownURN(b *testing.B) {
	for _, tc := range []struct {
		strategy UnknownURNStrategy
		settled  func(r *benchReceiver) int
	}{
		{UnknownURNFail, func(r *benchReceiver) int { return r.failed }},
		{UnknownURNRelease, func(r *benchReceiver) int { return r.failed }},
		{UnknownURNDelete, func(r *benchReceiver) int { return r.accepted }},
	} {
		b.Run(string(tc.strategy), func(b *testing.B) {
			reports := 0
			c := NewConsumer(Handlers{benchURN: benchAcceptOrder}, WithUnknownURN(tc.strategy),
				WithOnError(func(context.Context, error, *Envelope, *amqp.Message) { reports++ }))
			msg := benchDelivery(b, benchUnknown)
			msg.Value = benchPoisonBody
			r := &benchReceiver{}
			ctx := context.Background()
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				benchSinkErr = c.Handle(ctx, r, msg)
				n++
			}
			if tc.settled(r) != n || r.total() != n {
				b.Fatalf("%d deliveries: %d settled as %s wants, %d in all", n, tc.settled(r), tc.strategy, r.total())
			}
			if wantReports := map[bool]int{true: n, false: 0}[tc.strategy == UnknownURNFail]; reports != wantReports {
				b.Fatalf("%d reports for %d deliveries under %s", reports, n, tc.strategy)
			}
		})
	}
}

// TestUnknownURNDoesNotDecode proves that a message routed by its
// x-opt-jms-type to the unknown-URN strategy is settled without its body
// being read: a poison body (bad JSON, invalid UTF-8, a sequence section) is
// handled exactly as the strategy says and never reported as poison.
func TestUnknownURNDoesNotDecode(t *testing.T) {
	bodies := map[string]func(m *amqp.Message){
		"bad JSON":       func(m *amqp.Message) { m.Value = benchPoisonBody },
		"invalid UTF-8":  func(m *amqp.Message) { m.Value = nil; m.Data = [][]byte{{0xff, 0xfe, '{'}} },
		"sequence body":  func(m *amqp.Message) { m.Value = nil; m.Sequence = [][]any{{"a"}} },
		"no body at all": func(m *amqp.Message) { m.Value = nil },
	}
	strategies := []struct {
		strategy UnknownURNStrategy
		want     fakelink.Disposition
		reported bool
	}{
		{UnknownURNFail, fakelink.Failed, true},
		{UnknownURNRelease, fakelink.Failed, false},
		{UnknownURNDelete, fakelink.Accepted, false},
	}
	for name, setBody := range bodies {
		for _, s := range strategies {
			t.Run(name+"/"+string(s.strategy), func(t *testing.T) {
				var reports []error
				dlq := &fakelink.Sender{}
				c := NewConsumer(Handlers{benchURN: benchAcceptOrder}, WithUnknownURN(s.strategy), WithDeadLetterSender(dlq),
					WithOnError(func(_ context.Context, err error, env *Envelope, _ *amqp.Message) {
						assert.Nil(t, env, "no envelope was decoded")
						reports = append(reports, err)
					}))
				msg := benchDelivery(t, benchUnknown)
				setBody(msg)
				r := fakelink.NewReceiver(t, benchQueue)
				r.Track(msg)
				ret := c.Handle(context.Background(), r, msg)

				disp, ok := r.Disposition(msg)
				require.True(t, ok, "the delivery was not settled")
				assert.Equal(t, s.want, disp)
				assert.Empty(t, dlq.Sent(), "nothing goes to the DLQ")
				if s.reported {
					require.Len(t, reports, 1)
					assert.ErrorIs(t, reports[0], ErrUnknownURN)
					assert.NotErrorIs(t, reports[0], ErrPoison)
					assert.ErrorIs(t, ret, ErrUnknownURN)
				} else {
					assert.Empty(t, reports)
					assert.NoError(t, ret)
				}
			})
		}
	}
}

// --- the publisher -----------------------------------------------------------

func BenchmarkPublish(b *testing.B) {
	s := &benchSender{}
	p := NewPublisher(s, benchQueue)
	ctx := context.Background()
	data := benchOrderStruct()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		id, err := p.Publish(ctx, benchURN, data)
		if err != nil {
			b.Fatal(err)
		}
		benchSinkID = id
		n++
	}
	if s.sent != n {
		b.Fatalf("%d publishes, %d sends", n, s.sent)
	}
}

// benchFloorMessage builds by hand the message Publish puts on the wire, around
// a body that is already encoded: the least any AMQP publisher of this
// projection pays per message.
//
// The URN, trace id, message id and body vary per message, so they are
// parameters (boxing a variable string allocates, a constant does not); the
// bq_ values are constants here as in any hand-written publisher.
//
//go:noinline
func benchFloorMessage(urn, trace, id, body string, created time.Time) *amqp.Message {
	return &amqp.Message{
		Header:      &amqp.MessageHeader{Durable: true, Priority: 4},
		Annotations: amqp.Annotations{AnnotationJMSType: urn},
		Properties: &amqp.MessageProperties{
			MessageID:     id,
			CorrelationID: trace,
			ContentType:   &contentType,
			Subject:       &urn,
			CreationTime:  &created,
		},
		ApplicationProperties: map[string]any{
			PropSchemaVersion: "1",
			PropSourceLang:    Lang,
			PropAttempts:      "0",
			PropAppID:         AppID,
		},
		Value: body,
	}
}

// benchFloorPublish builds the floor message and sends it as Publish does.
func benchFloorPublish(ctx context.Context, s Sender, body, id string, created time.Time) error {
	return sendConfirmed(ctx, s, benchFloorMessage(benchURN, benchTrace, id, body, created))
}

const benchMessageID = "f1e2d3c4-b5a6-4789-90ab-cdef01234567"

func BenchmarkFloorMessage(b *testing.B) {
	s := &benchSender{}
	body := string(benchBody(b))
	created := time.UnixMilli(1749132727000).UTC()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := benchFloorPublish(ctx, s, body, benchMessageID, created); err != nil {
			b.Fatal(err)
		}
	}
}

// --- ratios, measured in one run ---------------------------------------------

// benchPair times subject against floor in the same benchmark, in
// alternating blocks of a few dozen operations, so both see the same machine
// load. On a shared machine a block is now and then stretched by another
// process; the medians of the per-block times leave those blocks out. It
// reports each side's median ns/op and their ratio, subject/floor, as
// x-floor. The benchmark's own ns/op is that of one subject plus one floor.
func benchPair(b *testing.B, floor, subject func() error) {
	const block = 32
	var floorTimes, subjectTimes []float64 // ns/op of each full block
	b.ReportAllocs()
	b.ResetTimer()
	for done, turn := 0, 0; done < b.N; turn++ {
		n := min(block, b.N-done)
		first, second := floor, subject
		if turn%2 == 1 {
			first, second = subject, floor
		}
		t0 := time.Now()
		for range n {
			if err := first(); err != nil {
				b.Fatal(err)
			}
		}
		t1 := time.Now()
		for range n {
			if err := second(); err != nil {
				b.Fatal(err)
			}
		}
		t2 := time.Now()
		if n == block || done == 0 {
			a, c := float64(t1.Sub(t0))/float64(n), float64(t2.Sub(t1))/float64(n)
			if turn%2 == 1 {
				a, c = c, a
			}
			floorTimes, subjectTimes = append(floorTimes, a), append(subjectTimes, c)
		}
		done += n
	}
	b.StopTimer()
	f, sub := median(floorTimes), median(subjectTimes)
	b.ReportMetric(sub/f, "x-floor")
	b.ReportMetric(sub, "subject-ns/op")
	b.ReportMetric(f, "floor-ns/op")
}

func median(v []float64) float64 {
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// BenchmarkRatios reports each subject's time as a multiple of its floor
// (x-floor), both measured in the same process. Its ns/op and allocs/op are
// those of one subject and one floor together.
func BenchmarkRatios(b *testing.B) {
	for _, tc := range []struct {
		name string
		data any
	}{{"roundtrip-struct", benchOrderStruct()}, {"roundtrip-map", benchOrderMap()}} {
		b.Run(tc.name, func(b *testing.B) {
			benchPair(b,
				func() error {
					m, err := benchFloorJSON(tc.data)
					benchSinkMap = m
					return err
				},
				func() error {
					env, err := benchRoundTrip(tc.data)
					benchSinkEnv = env
					return err
				})
		})
	}
	b.Run("decode-validate", func(b *testing.B) {
		body := benchBody(b)
		benchPair(b,
			func() error {
				var m map[string]any
				err := json.Unmarshal(body, &m)
				benchSinkMap = m
				return err
			},
			func() error {
				env, err := benchDecodeValidate(body)
				benchSinkEnv = env
				return err
			})
	})
	b.Run("publish", func(b *testing.B) {
		s := &benchSender{}
		p := NewPublisher(s, benchQueue)
		ctx := context.Background()
		data := benchOrderStruct()
		body := string(benchBody(b))
		created := time.UnixMilli(1749132727000).UTC()
		benchPair(b,
			func() error {
				return benchFloorPublish(ctx, s, body, benchMessageID, created)
			},
			func() error {
				id, err := p.Publish(ctx, benchURN, data)
				benchSinkID = id
				return err
			})
	})
}

// --- the fixtures measure what they claim to ---------------------------------

// TestBenchFixtures checks that the benchmarks' inputs and fakes do what the
// benchmarks assume: the round trip gives back the data, the floor reads the
// same fields, the floor message is the projection Publish sends, and
// Handle accepts the routed message through the counting receiver.
func TestBenchFixtures(t *testing.T) {
	for _, data := range []any{benchOrderStruct(), benchOrderMap()} {
		env, err := benchRoundTrip(data)
		require.NoError(t, err)
		assert.Equal(t, benchURN, env.URN())
		assert.Equal(t, benchTrace, env.TraceID)
		assert.JSONEq(t, `{"order_id":1042,"amount":99.9,"currency":"USD","note":"café ☕"}`, string(env.Data))
		m, err := benchFloorJSON(data)
		require.NoError(t, err)
		assert.Equal(t, map[string]any{"order_id": 1042.0, "amount": 99.9, "currency": "USD", "note": "café ☕"}, m)
	}

	body := benchBody(t)
	assert.Contains(t, string(body), `"note":"café ☕"`, "non-ASCII stays UTF-8")
	env, err := benchDecodeValidate(body)
	require.NoError(t, err)
	assert.Equal(t, int64(1749132727000), env.Meta.CreatedAt)

	// The hand-built floor message is the projection Publish sends, and the
	// floor's send goes through the accepting sender.
	want, err := NewMessage(env)
	require.NoError(t, err)
	assert.Equal(t, want, benchFloorMessage(env.Job, env.TraceID, env.Meta.ID, string(body), time.UnixMilli(env.Meta.CreatedAt).UTC()))
	s := &benchSender{}
	require.NoError(t, benchFloorPublish(context.Background(), s, string(body), benchMessageID, time.Now()))
	p := NewPublisher(s, benchQueue)
	id, err := p.Publish(context.Background(), benchURN, benchOrderStruct())
	require.NoError(t, err)
	assert.NotEmpty(t, id)
	assert.Equal(t, 2, s.sent)

	// Handle settles through the counting receiver.
	c := NewConsumer(Handlers{benchURN: benchAcceptOrder})
	r := &benchReceiver{}
	require.NoError(t, c.Handle(context.Background(), r, benchDelivery(t, benchURN)))
	assert.Equal(t, 1, r.accepted)
	assert.Equal(t, 1, r.total())
}

// --- the fast decode path agrees with the checked one ------------------------

// Decode first tries one pass that checks JSON and UTF-8 while it walks the
// members (decodeFast), and falls back to the path that runs utf8.ValidString
// and json.Valid over the whole body first (decodeChecked). These tests hold
// the fast path to the checked one: it must never take a body the checked
// path refuses, nor decode one differently.

// scanValid is the fast path's verdict on a whole JSON text.
func scanValid(s string) bool {
	end, _, ok := scanValue(s, skipSpace(s, 0), 0)
	return ok && skipSpace(s, end) == len(s)
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
	shallow := nesting(s) < maxScanDepth
	if got := scanValid(s); got != want && (got || shallow) {
		t.Fatalf("scanValue says valid=%t, utf8+encoding/json say %t: %q", got, want, s)
	}
	fast, ok := decodeFast(s, true)
	checked, err := decodeChecked(s, true)
	switch {
	case ok && err != nil:
		t.Fatalf("the fast path decoded a body the checked path refuses (%v): %q", err, s)
	case ok:
		require.Equal(t, checked, fast, "the paths decode %q differently", s)
	case err == nil && shallow:
		t.Fatalf("the fast path refused a body the checked path decodes: %q", s)
	}
}

var scanSeeds = []string{
	`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042,"amount":99.9,"currency":"USD","note":"café ☕"},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`,
	` { "urn" : "urn:x" , "trace_id" : "t" , "data" : { "a" : [ 1 , -2.5e+3 , true , false , null , { } , [ ] ] } , "meta" : { "schema_version" : 1 , "x" : [ ] } , "attempts" : 3 , "y" : "z" } `,
	`{"job":"\u0075rn:x","tr\u0061ce_id":"\ud800\t\"\\\/\b\f\n\r","data":{"\u00e9":"\uFFFF"},"meta":{"schema_version":1,"m\u0065ta":0},"attempts":0,"dead_letter":{"reason":"failed","error":null,"exception":null,"failed_at":1,"original_queue":"q","attempts":3,"lang":"go"}}`,
	`{"job":"urn:x","job":"urn:y","data":{},"meta":{"schema_version":1},"meta":{"id":"a"},"attempts":0}`,
	`{"job":1,"data":[],"meta":"m","attempts":1.5,"dead_letter":7}`,
	`{}`, `{"a":{}}`, `[]`, `null`, `"s"`, `0`, ``, ` `,
	`{"n":0}`, `{"n":-0}`, `{"n":-}`, `{"n":01}`, `{"n":1.}`, `{"n":.5}`, `{"n":1e}`, `{"n":1e+}`, `{"n":1E-07}`, `{"n":+1}`,
	`{"s":"\x"}`, `{"s":"\x0041"}`, `{"s":"\U0041"}`, `{"s":"\'"}`, `{"s":"\a"}`, `{"s":"\u12"}`, `{"s":"\u12g4"}`, "{\"s\":\"a\x01b\"}", "{\"s\":\"\xff\"}", "{\"s\":\"\xed\xa0\x80\"}", "{\"s\":\"\xc3\xa9\xe2\x98\x95\xf0\x9f\x98\x80\"}",
	`{"a":tru}`, `{"a":nul}`, `{"a":falsey}`, `{"a" "b"}`, `{"a":1,}`, `{,"a":1}`, `{"a":1 "b":2}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":1}}`, `{"a":1} x`, `{"a":1`, `{"a":"1`, `{"a`, `{1:2}`,
	"\ufeff{}", "{\"a\":1}\x00", "{\n\t\"a\"\r:\n1\t}",
}

func TestFastDecodeMatchesChecked(t *testing.T) {
	for _, s := range scanSeeds {
		checkFastDecode(t, s)
	}
	// Deeper than the fast path goes: decoded by the checked path all the same.
	deep := `{"job":"urn:x","trace_id":"t","data":{"d":` + strings.Repeat("[", maxScanDepth+5) + strings.Repeat("]", maxScanDepth+5) +
		`},"meta":{"schema_version":1},"attempts":0}`
	_, ok := decodeFast(deep, true)
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

// TestMintedIDs: meta.id and a minted trace id are distinct UUID v4 strings
// drawn through github.com/google/uuid (so uuid.SetRand applies), the trace
// id first, exactly as uuid.NewString would format them.
func TestMintedIDs(t *testing.T) {
	random := make([]byte, 64)
	for i := range random {
		random[i] = byte(i*37 + 11)
	}
	want := func(r io.Reader) string { return uuid.Must(uuid.NewRandomFromReader(r)).String() }
	src := bytes.NewReader(random)
	wantTrace, wantID := want(src), want(src)

	uuid.SetRand(bytes.NewReader(random))
	env, err := NewEnvelope(benchURN, nil)
	uuid.SetRand(nil)
	require.NoError(t, err)
	assert.Equal(t, wantTrace, env.TraceID)
	assert.Equal(t, wantID, env.Meta.ID)

	uuid.SetRand(bytes.NewReader(random))
	env, err = NewEnvelope(benchURN, nil, EnvelopeTraceID(benchTrace))
	uuid.SetRand(nil)
	require.NoError(t, err)
	assert.Equal(t, benchTrace, env.TraceID)
	assert.Equal(t, wantTrace, env.Meta.ID, "with a given trace id, meta.id takes the first draw")

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

// TestProjectionBoxedValues: the pre-boxed property values are the strings
// the contract wants, and values off the usual path are still rendered.
func TestProjectionBoxedValues(t *testing.T) {
	for _, tc := range []struct {
		version, attempts int
		lang              string
	}{{1, 0, "go"}, {1, 15, "go"}, {1, 16, "php"}, {2, 12345, ""}, {0, -1, "go"}} {
		env := &Envelope{Job: benchURN, TraceID: benchTrace, Attempts: tc.attempts,
			Meta: Meta{ID: "i", Lang: tc.lang, SchemaVersion: tc.version}}
		msg, err := NewMessage(env)
		require.NoError(t, err)
		assert.Equal(t, map[string]any{
			PropSchemaVersion: strconv.Itoa(tc.version),
			PropSourceLang:    tc.lang,
			PropAttempts:      strconv.Itoa(tc.attempts),
			PropAppID:         AppID,
		}, msg.ApplicationProperties)
	}
}

// TestAllocationBudgets holds the hot paths to the allocation counts the
// benchmarks report, so a change that adds one shows up in go test. A
// message routed to a strategy that reports nothing allocates nothing at
// all: in particular its body is never decoded, which would allocate at
// least the Envelope.
func TestAllocationBudgets(t *testing.T) {
	ctx := context.Background()
	body := benchBody(t)
	routed := NewConsumer(Handlers{benchURN: benchAcceptOrder})
	routedMsg := benchDelivery(t, benchURN)
	unknownMsg := benchDelivery(t, benchUnknown)
	unknownMsg.Value = benchPoisonBody
	release := NewConsumer(nil, WithUnknownURN(UnknownURNRelease))
	drop := NewConsumer(nil, WithUnknownURN(UnknownURNDelete))
	r := &benchReceiver{}
	p := NewPublisher(&benchSender{}, benchQueue)
	structData, mapData := any(benchOrderStruct()), any(benchOrderMap())

	for _, tc := range []struct {
		name string
		max  float64
		run  func() error
	}{
		{"round trip, struct data", 20, func() error { _, err := benchRoundTrip(structData); return err }},
		{"round trip, map data", 20, func() error { _, err := benchRoundTrip(mapData); return err }},
		{"decode and validate", 2, func() error { _, err := benchDecodeValidate(body); return err }},
		{"Handle, routed and accepted", 3, func() error { return routed.Handle(ctx, r, routedMsg) }},
		{"Handle, unknown URN, release", 0, func() error { return release.Handle(ctx, r, unknownMsg) }},
		{"Handle, unknown URN, delete", 0, func() error { return drop.Handle(ctx, r, unknownMsg) }},
		// 17 without the race detector; with it, sync.Pool drops some of
		// encoding/json's encoder states, which then cost an allocation.
		{"Publish", 20, func() error { _, err := p.Publish(ctx, benchURN, structData); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			allocs := testing.AllocsPerRun(50, func() {
				if e := tc.run(); e != nil {
					err = e
				}
			})
			require.NoError(t, err)
			assert.LessOrEqual(t, allocs, tc.max, "allocations per operation")
		})
	}
}
