package artemis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// renderMessage writes an *amqp.Message as deterministic, indented JSON for
// the projection goldens: every header and property field, annotations and
// application properties sorted by key with their Go type names, and the
// body section kind with the body text.
func renderMessage(t *testing.T, msg *amqp.Message) []byte {
	t.Helper()
	type field struct {
		Key   string `json:"key"`
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	type typedValue struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	type header struct {
		Durable       bool   `json:"durable"`
		Priority      uint8  `json:"priority"`
		TTL           string `json:"ttl"`
		FirstAcquirer bool   `json:"first_acquirer"`
		DeliveryCount uint32 `json:"delivery_count"`
	}
	type properties struct {
		MessageID          *typedValue `json:"message_id"`
		UserID             *string     `json:"user_id"`
		To                 *string     `json:"to"`
		Subject            *string     `json:"subject"`
		ReplyTo            *string     `json:"reply_to"`
		CorrelationID      *typedValue `json:"correlation_id"`
		ContentType        *string     `json:"content_type"`
		ContentEncoding    *string     `json:"content_encoding"`
		AbsoluteExpiryTime *string     `json:"absolute_expiry_time"`
		CreationTime       *string     `json:"creation_time"`
		GroupID            *string     `json:"group_id"`
		GroupSequence      *uint32     `json:"group_sequence"`
		ReplyToGroupID     *string     `json:"reply_to_group_id"`
	}
	type rendered struct {
		Format                uint32      `json:"format"`
		Header                *header     `json:"header"`
		DeliveryAnnotations   []field     `json:"delivery_annotations"`
		Annotations           []field     `json:"annotations"`
		Properties            *properties `json:"properties"`
		ApplicationProperties []field     `json:"application_properties"`
		BodyKind              string      `json:"body_kind"`
		Body                  string      `json:"body"`
		Footer                []field     `json:"footer"`
	}
	value := func(v any) string {
		switch x := v.(type) {
		case time.Time:
			return fmt.Sprintf("%s (%d ms)", x.UTC().Format(time.RFC3339Nano), x.UnixMilli())
		case []byte:
			return fmt.Sprintf("%q", x)
		}
		return fmt.Sprint(v)
	}
	typed := func(v any) *typedValue {
		if v == nil {
			return nil
		}
		return &typedValue{Type: fmt.Sprintf("%T", v), Value: value(v)}
	}
	annotations := func(a amqp.Annotations) []field {
		out := []field{}
		for k, v := range a {
			out = append(out, field{Key: fmt.Sprint(k), Type: fmt.Sprintf("%T", v), Value: value(v)})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
		return out
	}
	timeString := func(t *time.Time) *string {
		if t == nil {
			return nil
		}
		s := value(*t)
		return &s
	}

	r := rendered{
		Format:                msg.Format,
		DeliveryAnnotations:   annotations(msg.DeliveryAnnotations),
		Annotations:           annotations(msg.Annotations),
		ApplicationProperties: []field{},
		Footer:                annotations(msg.Footer),
	}
	if h := msg.Header; h != nil {
		r.Header = &header{Durable: h.Durable, Priority: h.Priority, TTL: h.TTL.String(), FirstAcquirer: h.FirstAcquirer, DeliveryCount: h.DeliveryCount}
	}
	if p := msg.Properties; p != nil {
		r.Properties = &properties{
			MessageID: typed(p.MessageID), To: p.To, Subject: p.Subject, ReplyTo: p.ReplyTo,
			CorrelationID: typed(p.CorrelationID), ContentType: p.ContentType, ContentEncoding: p.ContentEncoding,
			AbsoluteExpiryTime: timeString(p.AbsoluteExpiryTime), CreationTime: timeString(p.CreationTime),
			GroupID: p.GroupID, GroupSequence: p.GroupSequence, ReplyToGroupID: p.ReplyToGroupID,
		}
		if p.UserID != nil {
			s := fmt.Sprintf("%q", p.UserID)
			r.Properties.UserID = &s
		}
	}
	for k, v := range msg.ApplicationProperties {
		r.ApplicationProperties = append(r.ApplicationProperties, field{Key: k, Type: fmt.Sprintf("%T", v), Value: value(v)})
	}
	sort.Slice(r.ApplicationProperties, func(i, j int) bool { return r.ApplicationProperties[i].Key < r.ApplicationProperties[j].Key })
	switch {
	case msg.Value != nil:
		r.BodyKind = fmt.Sprintf("value %T", msg.Value)
		r.Body = value(msg.Value)
	case msg.Data != nil:
		r.BodyKind = fmt.Sprintf("data x%d", len(msg.Data))
		r.Body = string(bytes.Join(msg.Data, nil))
	case msg.Sequence != nil:
		r.BodyKind = fmt.Sprintf("sequence x%d", len(msg.Sequence))
		r.Body = fmt.Sprint(msg.Sequence)
	default:
		r.BodyKind = "none"
	}

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fixedClock is the publish time the delay cases are computed from.
var fixedClock = time.Date(2025, 6, 5, 14, 12, 7, 250_000_000, time.UTC) // 1749132727250 ms

func withClock(now time.Time) PublishOption {
	return func(c *publishConfig) { c.now = func() time.Time { return now } }
}

// contractPHP is CONTRACT.md's order-created envelope as a PHP producer
// wrote it: the cross-SDK conformance input of section 2.
func contractPHP(t *testing.T) *Envelope {
	t.Helper()
	env := mustDecode(t, contractExample)
	env.Meta.Lang = "php"
	return env
}

func mustMessage(t *testing.T, env *Envelope, opts ...PublishOption) *amqp.Message {
	t.Helper()
	msg, err := NewMessage(env, opts...)
	if err != nil {
		t.Fatalf("NewMessage: %v", err)
	}
	return msg
}

func TestNewMessageGolden(t *testing.T) {
	redelivered := mustDecode(t, `{"job":"urn:babel:cafés:créé","trace_id":"trace-1","data":{ "a" : 1 },"meta":{"id":"msg-1","queue":"cafés","lang":"python","schema_version":1,"created_at":1749132727001,"host":"w1"},"attempts":4,"x_custom":[1,2]}`)

	dead := fixedEnvelope(t, "urn:babel:orders:created", map[string]int{"order_id": 1042})
	dead.Attempts = 3
	dead.DeadLetter = &DeadLetter{Reason: ReasonFailed, Error: ptr("Payment gateway timeout"), Exception: ptr("*app.GatewayError"),
		FailedAt: 1749132730000, OriginalQueue: "orders", Attempts: 3, Lang: "go"}

	headers := map[string]string{
		"traceparent":       "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"tracestate":        "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
		"baggage":           "userId=alice,isProduction=false",
		"":                  "blank key",
		"   ":               "space key",
		"empty-value":       "",
		"blank-value":       " \t ",
		"bq_attempts":       "99",
		"bq_source_lang":    "rust",
		"bq_schema_version": "2",
		"bq_app_id":         "someone-else",
		"bq_custom":         "kept: no contract property has this name",
	}

	tests := []struct {
		name string
		env  *Envelope
		opts []PublishOption
	}{
		{name: "contract_php", env: contractPHP(t)},
		{name: "contract_go", env: mustDecode(t, contractExample)},
		{name: "new_envelope", env: fixedEnvelope(t, "urn:babel:orders:created", orderCreated{OrderID: 1042, Customer: "<ACME & Co>"})},
		{name: "redelivered_unknown_keys", env: redelivered},
		{name: "headers", env: contractPHP(t), opts: []PublishOption{WithHeaders(headers)}},
		{name: "delay", env: contractPHP(t), opts: []PublishOption{withClock(fixedClock), WithDelay(90 * time.Second)}},
		{name: "duplicate_detection", env: contractPHP(t), opts: []PublishOption{WithDuplicateDetection()}},
		{name: "all_options", env: mustDecode(t, contractExample), opts: []PublishOption{
			WithHeaders(HeaderCarrier{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
			WithDelay(1500 * time.Millisecond), withClock(fixedClock), WithDuplicateDetection(),
		}},
		{name: "dead_letter", env: dead},
	}
	var names []string
	for _, tt := range tests {
		names = append(names, tt.name)
		t.Run(tt.name, func(t *testing.T) {
			msg := mustMessage(t, tt.env, tt.opts...)
			assertGolden(t, filepath.Join("testdata", "projection", tt.name+".golden"), renderMessage(t, msg))

			// The body is exactly the canonical encoding.
			want := mustEncode(t, tt.env)
			if got, ok := msg.Value.(string); !ok || got != string(want) {
				t.Errorf("body %#v, want the string %s", msg.Value, want)
			}
			if msg.Data != nil || msg.Sequence != nil {
				t.Errorf("extra body sections: data %q sequence %v", msg.Data, msg.Sequence)
			}
		})
	}
	assertNoOrphanGoldens(t, filepath.Join("testdata", "projection"), ".golden", names)
}

// TestNewMessageConformance checks the shared cross-SDK suite's values for
// the order-created envelope with "lang":"php" (CONTRACT.md section 2)
// directly, not only through the golden file.
func TestNewMessageConformance(t *testing.T) {
	msg := mustMessage(t, contractPHP(t))

	if len(msg.Annotations) != 1 || msg.Annotations[AnnotationJMSType] != "urn:babel:orders:created" {
		t.Errorf("annotations %v, want exactly x-opt-jms-type=urn:babel:orders:created", msg.Annotations)
	}
	if _, ok := msg.Annotations["x-opt-jms-type"].(string); !ok {
		t.Errorf("x-opt-jms-type is a %T, want a string", msg.Annotations["x-opt-jms-type"])
	}
	want := map[string]any{
		"bq_schema_version": "1",
		"bq_source_lang":    "php",
		"bq_attempts":       "0",
		"bq_app_id":         "babelqueue",
	}
	if !reflect.DeepEqual(msg.ApplicationProperties, want) {
		t.Errorf("application properties %#v, want exactly %#v", msg.ApplicationProperties, want)
	}
	for k := range msg.ApplicationProperties {
		if strings.Contains(k, "-") {
			t.Errorf("application property %q has a hyphen: not a Java identifier", k)
		}
	}
	p := msg.Properties
	if p == nil {
		t.Fatal("no properties")
	}
	if p.CorrelationID != "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b" {
		t.Errorf("correlation-id %#v", p.CorrelationID)
	}
	if p.MessageID != "f1e2d3c4-b5a6-4789-90ab-cdef01234567" {
		t.Errorf("message-id %#v", p.MessageID)
	}
	if p.ContentType == nil || *p.ContentType != "application/json" {
		t.Errorf("content-type %v", p.ContentType)
	}
	if p.CreationTime == nil || p.CreationTime.UnixMilli() != 1749132727000 || p.CreationTime.Location() != time.UTC {
		t.Errorf("creation-time %v, want 1749132727000 ms UTC", p.CreationTime)
	}
	if p.Subject == nil || *p.Subject != "urn:babel:orders:created" {
		t.Errorf("subject %v, want the URN (Artemis maps it to JMSType)", p.Subject)
	}
	if p.To != nil || p.ReplyTo != nil || p.GroupID != nil || p.UserID != nil || p.ContentEncoding != nil {
		t.Errorf("unexpected properties: %+v", p)
	}
	if msg.Header == nil || !msg.Header.Durable {
		t.Errorf("header %+v, want durable", msg.Header)
	}
	body, ok := msg.Value.(string)
	if !ok {
		t.Fatalf("body is a %T, want an AMQP value string", msg.Value)
	}
	if wantBody := strings.Replace(contractExample, `"lang":"go"`, `"lang":"php"`, 1); body != wantBody {
		t.Errorf("body\n got: %s\nwant: %s", body, wantBody)
	}
	// The URN, trace id and message id ride the JMS-native slots, never bq_ properties.
	for _, v := range msg.ApplicationProperties {
		if s := v.(string); s == contractTraceID || s == contractMessageID || s == "urn:babel:orders:created" {
			t.Errorf("identity value %q is an application property", s)
		}
	}
}

func TestNewMessageAttemptsProperty(t *testing.T) {
	for _, n := range []int{0, 1, 9, 10, 12345, math.MaxInt64} {
		env := contractPHP(t)
		env.Attempts = n
		msg := mustMessage(t, env)
		if got, want := msg.ApplicationProperties[PropAttempts], fmt.Sprint(n); got != want {
			t.Errorf("attempts %d: bq_attempts %#v, want %q", n, got, want)
		}
	}
}

func TestNewMessageRejects(t *testing.T) {
	tests := []struct {
		name string
		env  *Envelope
	}{
		{"blank job", &Envelope{Job: "  ", TraceID: "t", Data: json.RawMessage(`{}`)}},
		{"empty job", &Envelope{TraceID: "t"}},
		{"array data", &Envelope{Job: "urn:a:b", TraceID: "t", Data: json.RawMessage(`[1]`)}},
		{"null data", &Envelope{Job: "urn:a:b", TraceID: "t", Data: json.RawMessage(`null`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, err := NewMessage(tt.env)
			if err == nil || !errors.Is(err, ErrInvalidEnvelope) || msg != nil {
				t.Errorf("NewMessage = %v, %v; want nil and an ErrInvalidEnvelope", msg, err)
			}
		})
	}
}

func TestWithHeaders(t *testing.T) {
	base := mustMessage(t, contractPHP(t))
	baseRender := renderMessage(t, base)

	t.Run("no headers is identical to no option", func(t *testing.T) {
		for name, opt := range map[string]PublishOption{
			"nil map":       WithHeaders(nil),
			"empty map":     WithHeaders(map[string]string{}),
			"empty carrier": WithHeaders(HeaderCarrier{}),
			"only blanks":   WithHeaders(map[string]string{"": "v", " ": "v", "k": "", "k2": "  ", "\t": "\t"}),
		} {
			msg := mustMessage(t, contractPHP(t), opt)
			if !reflect.DeepEqual(msg, base) {
				t.Errorf("%s: message differs from a publish without headers:\n%s\nwant\n%s", name, renderMessage(t, msg), baseRender)
			}
			if got := renderMessage(t, msg); !bytes.Equal(got, baseRender) {
				t.Errorf("%s: rendering differs", name)
			}
		}
	})

	t.Run("headers ride beside the contract properties", func(t *testing.T) {
		msg := mustMessage(t, contractPHP(t), WithHeaders(map[string]string{
			"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			"tracestate":  "rojo=00f067aa0ba902b7",
			" padded ":    " value kept as is ", //nolint:gocritic // a key with spaces on purpose
		}))
		want := map[string]any{
			"bq_schema_version": "1", "bq_source_lang": "php", "bq_attempts": "0", "bq_app_id": "babelqueue",
			"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			"tracestate":  "rojo=00f067aa0ba902b7",
			" padded ":    " value kept as is ", //nolint:gocritic // a key with spaces on purpose
		}
		if !reflect.DeepEqual(msg.ApplicationProperties, want) {
			t.Errorf("application properties %#v, want %#v", msg.ApplicationProperties, want)
		}
		// Headers change nothing else.
		msg.ApplicationProperties = base.ApplicationProperties
		if !reflect.DeepEqual(msg, base) {
			t.Errorf("headers changed more than the application properties")
		}
	})

	t.Run("a bq_ collision loses to the contract value", func(t *testing.T) {
		msg := mustMessage(t, contractPHP(t), WithHeaders(map[string]string{
			"bq_schema_version": "2", "bq_source_lang": "go", "bq_attempts": "7", "bq_app_id": "other",
		}))
		if !reflect.DeepEqual(msg.ApplicationProperties, base.ApplicationProperties) {
			t.Errorf("application properties %#v, want %#v", msg.ApplicationProperties, base.ApplicationProperties)
		}
	})

	t.Run("several WithHeaders merge, later wins", func(t *testing.T) {
		msg := mustMessage(t, contractPHP(t),
			WithHeaders(map[string]string{"a": "1", "b": "1"}),
			WithHeaders(map[string]string{"b": "2", "c": "2"}))
		for k, want := range map[string]string{"a": "1", "b": "2", "c": "2"} {
			if got := msg.ApplicationProperties[k]; got != want {
				t.Errorf("%s = %#v, want %q", k, got, want)
			}
		}
	})

	t.Run("the caller's map is not modified", func(t *testing.T) {
		h := map[string]string{"": "x", "k": "v"}
		mustMessage(t, contractPHP(t), WithHeaders(h))
		if len(h) != 2 || h[""] != "x" || h["k"] != "v" {
			t.Errorf("caller's map changed: %v", h)
		}
	})
}

func TestWithDelay(t *testing.T) {
	tests := []struct {
		name  string
		delay time.Duration
		want  int64 // 0: no annotation
	}{
		{"one millisecond", time.Millisecond, 1749132727251},
		{"ninety seconds", 90 * time.Second, 1749132817250},
		{"one hour", time.Hour, 1749136327250},
		{"sub-millisecond rounds down", 1500 * time.Microsecond, 1749132727251},
		{"one nanosecond", time.Nanosecond, 1749132727250},
		{"zero", 0, 0},
		{"negative", -time.Minute, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := mustMessage(t, contractPHP(t), withClock(fixedClock), WithDelay(tt.delay))
			v, ok := msg.Annotations[AnnotationDeliveryTime]
			if tt.want == 0 {
				if ok {
					t.Errorf("x-opt-delivery-time set to %#v for a delay of %v", v, tt.delay)
				}
				if !reflect.DeepEqual(msg, mustMessage(t, contractPHP(t))) {
					t.Errorf("a delay <= 0 changed the message")
				}
				return
			}
			ms, isLong := v.(int64)
			if !isLong {
				t.Fatalf("x-opt-delivery-time is %#v (%T), want an int64 (AMQP long)", v, v)
			}
			if ms != tt.want {
				t.Errorf("x-opt-delivery-time %d, want %d", ms, tt.want)
			}
			if _, rel := msg.Annotations[AnnotationDeliveryDelay]; rel {
				t.Errorf("x-opt-delivery-delay set beside x-opt-delivery-time")
			}
			if msg.Annotations[AnnotationJMSType] != "urn:babel:orders:created" {
				t.Errorf("x-opt-jms-type lost: %v", msg.Annotations)
			}
		})
	}

	t.Run("real clock", func(t *testing.T) {
		before := time.Now().Add(time.Minute).UnixMilli()
		msg := mustMessage(t, contractPHP(t), WithDelay(time.Minute))
		after := time.Now().Add(time.Minute).UnixMilli()
		ms, _ := msg.Annotations[AnnotationDeliveryTime].(int64)
		if ms < before || ms > after {
			t.Errorf("x-opt-delivery-time %d not in [%d, %d]", ms, before, after)
		}
	})
}

func TestWithDuplicateDetection(t *testing.T) {
	msg := mustMessage(t, contractPHP(t), WithDuplicateDetection())
	if got := msg.ApplicationProperties[PropDuplicateID]; got != contractMessageID {
		t.Errorf("_AMQ_DUPL_ID %#v, want %q", got, contractMessageID)
	}
	if len(msg.ApplicationProperties) != 5 {
		t.Errorf("application properties %v, want the four bq_ ones and _AMQ_DUPL_ID", msg.ApplicationProperties)
	}
	if _, ok := mustMessage(t, contractPHP(t)).ApplicationProperties[PropDuplicateID]; ok {
		t.Errorf("_AMQ_DUPL_ID set without WithDuplicateDetection")
	}
	noID := contractPHP(t)
	noID.Meta.ID = ""
	if v, ok := mustMessage(t, noID, WithDuplicateDetection()).ApplicationProperties[PropDuplicateID]; ok {
		t.Errorf("_AMQ_DUPL_ID %#v set from an empty meta.id", v)
	}
	// A header of the same name does not override it either.
	msg = mustMessage(t, contractPHP(t), WithHeaders(map[string]string{PropDuplicateID: "mine"}), WithDuplicateDetection())
	if got := msg.ApplicationProperties[PropDuplicateID]; got != contractMessageID {
		t.Errorf("_AMQ_DUPL_ID %#v, want meta.id", got)
	}
}

func TestReconcileAttempts(t *testing.T) {
	tests := []struct {
		body  int
		count uint32
		want  int
	}{
		// CONTRACT.md section 3.
		{0, 0, 0},
		{0, 2, 2},
		{2, 5, 5},
		{5, 1, 5},
		{4, 0, 4},
		{3, 3, 3},
		// The whole uint32 range of delivery-count.
		{0, math.MaxUint32, math.MaxUint32},
		{math.MaxInt, math.MaxUint32, math.MaxInt},
		{1 << 40, 7, 1 << 40},
	}
	for _, tt := range tests {
		if got := ReconcileAttempts(tt.body, tt.count); got != tt.want {
			t.Errorf("ReconcileAttempts(%d, %d) = %d, want %d", tt.body, tt.count, got, tt.want)
		}
	}
}

func TestDeliveryCountAndRoutingURN(t *testing.T) {
	if got := deliveryCount(&amqp.Message{}); got != 0 {
		t.Errorf("deliveryCount without a header = %d", got)
	}
	if got := deliveryCount(&amqp.Message{Header: &amqp.MessageHeader{DeliveryCount: 4}}); got != 4 {
		t.Errorf("deliveryCount = %d, want 4", got)
	}
	subject := func(s string) *string { return &s }
	tests := []struct {
		name    string
		ann     amqp.Annotations
		subject *string
		want    string
	}{
		{"no annotations", nil, nil, ""},
		{"subject when the annotation is absent", nil, subject("urn:jms:type"), "urn:jms:type"},
		{"the annotation wins over the subject", amqp.Annotations{AnnotationJMSType: "urn:a:b"}, subject("urn:jms:type"), "urn:a:b"},
		{"subject when the annotation is blank", amqp.Annotations{AnnotationJMSType: " "}, subject("urn:jms:type"), "urn:jms:type"},
		{"blank subject", nil, subject(" \t"), ""},
		{"absent", amqp.Annotations{"x-opt-other": "urn:a:b"}, nil, ""},
		{"string", amqp.Annotations{AnnotationJMSType: "urn:a:b"}, nil, "urn:a:b"},
		{"blank", amqp.Annotations{AnnotationJMSType: "  "}, nil, ""},
		{"not a string", amqp.Annotations{AnnotationJMSType: int64(1)}, nil, ""},
		{"symbol is not a string", amqp.Annotations{AnnotationJMSType: amqp.Symbol("urn:a:b")}, nil, ""},
	}
	for _, tt := range tests {
		msg := &amqp.Message{Annotations: tt.ann}
		if tt.subject != nil {
			msg.Properties = &amqp.MessageProperties{Subject: tt.subject}
		}
		if got := routingURN(msg); got != tt.want {
			t.Errorf("%s: routingURN = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestReadBody(t *testing.T) {
	tests := []struct {
		name     string
		msg      *amqp.Message
		want     string
		wantKind bodyKind
		wantErr  string
	}{
		{name: "value string", msg: &amqp.Message{Value: contractExample}, want: contractExample, wantKind: bodyString},
		{name: "value empty string", msg: &amqp.Message{Value: ""}, want: "", wantKind: bodyString},
		{name: "value binary", msg: &amqp.Message{Value: []byte(contractExample)}, want: contractExample, wantKind: bodyBinary},
		{name: "value binary invalid UTF-8", msg: &amqp.Message{Value: []byte{0xff, 0x00}}, want: "\xff\x00", wantKind: bodyBinary},
		{name: "one data section", msg: amqp.NewMessage([]byte(contractExample)), want: contractExample, wantKind: bodyData},
		{name: "one empty data section", msg: &amqp.Message{Data: [][]byte{{}}}, want: "", wantKind: bodyData},
		{name: "several data sections", msg: &amqp.Message{Data: [][]byte{[]byte(contractExample[:10]), []byte(contractExample[10:50]), {}, []byte(contractExample[50:])}}, want: contractExample, wantKind: bodyData},
		{name: "sequence", msg: &amqp.Message{Sequence: [][]any{{"a", int64(1)}}}, wantErr: "sequence"},
		{name: "int value", msg: &amqp.Message{Value: int64(1042)}, wantErr: "int64"},
		{name: "map value", msg: &amqp.Message{Value: map[string]any{"job": "urn:a:b"}}, wantErr: "map"},
		{name: "symbol value", msg: &amqp.Message{Value: amqp.Symbol(contractExample)}, wantErr: "Symbol"},
		{name: "null value", msg: &amqp.Message{Value: amqp.Null{}}, wantErr: "null"},
		{name: "no body", msg: &amqp.Message{}, wantErr: "no body"},
		{name: "empty data list", msg: &amqp.Message{Data: [][]byte{}}, wantErr: "no body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, kind, err := readBody(tt.msg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("readBody = %q, %v; want an error mentioning %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || kind != tt.wantKind {
				t.Errorf("readBody = %q kind %d, want %q kind %d", got, kind, tt.want, tt.wantKind)
			}
		})
	}

	t.Run("data sections are copied when joined", func(t *testing.T) {
		a, b := []byte(`{"x":`), []byte(`1}`)
		got, _, err := readBody(&amqp.Message{Data: [][]byte{a, b}})
		if err != nil {
			t.Fatal(err)
		}
		a[0], b[0] = 'X', 'X'
		if got != `{"x":1}` {
			t.Errorf("joined body changed with its sections: %q", got)
		}
	})
}

func TestHeaders(t *testing.T) {
	u := amqp.UUID{0x7b, 0x3f, 0x9c, 0x2a, 0xe4, 0x1d, 0x4f, 0x88, 0x9b, 0x2a, 0x1c, 0x0d, 0x5e, 0x6f, 0x7a, 0x8b}
	msg := &amqp.Message{ApplicationProperties: map[string]any{
		"string":    "v",
		"padded":    " v ",
		"bool_t":    true,
		"bool_f":    false,
		"int64":     int64(-9007199254740993),
		"int32":     int32(-2147483648),
		"int16":     int16(-300),
		"int8":      int8(-8),
		"int":       12,
		"uint64":    uint64(math.MaxUint64),
		"uint32":    uint32(4294967295),
		"uint16":    uint16(65535),
		"uint8":     uint8(255),
		"float64":   1.5,
		"float64_i": float64(3),
		"float64_b": 1e21,
		"float32":   float32(0.1),
		"time":      time.UnixMilli(1749132727000).In(time.FixedZone("X", 3600)),
		"bytes":     []byte("raw"),
		"uuid":      u,
		"symbol":    amqp.Symbol("sym"),
		"nil":       nil,
		"null":      amqp.Null{},
		"empty":     "",
		"blank":     " \t",
		"blank_b":   []byte("  "),
		"":          "blank key",
		"  ":        "blank key",
	}}
	want := HeaderCarrier{
		"string":    "v",
		"padded":    " v ",
		"bool_t":    "true",
		"bool_f":    "false",
		"int64":     "-9007199254740993",
		"int32":     "-2147483648",
		"int16":     "-300",
		"int8":      "-8",
		"int":       "12",
		"uint64":    "18446744073709551615",
		"uint32":    "4294967295",
		"uint16":    "65535",
		"uint8":     "255",
		"float64":   "1.5",
		"float64_i": "3",
		"float64_b": "1e+21",
		"float32":   "0.1",
		"time":      "1749132727000",
		"bytes":     "raw",
		"uuid":      "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
		"symbol":    "sym",
	}
	got := Headers(msg)
	if !reflect.DeepEqual(got, want) {
		for _, k := range append(got.Keys(), want.Keys()...) {
			if got[k] != want[k] {
				t.Errorf("%q: got %q, want %q", k, got[k], want[k])
			}
		}
		t.Errorf("Headers = %v\nwant %v", got, want)
	}

	if h := Headers(&amqp.Message{}); h == nil || len(h) != 0 {
		t.Errorf("Headers without application properties = %#v, want an empty carrier", h)
	}
	// The projection's own properties read back unchanged.
	back := Headers(mustMessage(t, contractPHP(t), WithHeaders(map[string]string{"traceparent": "tp"})))
	wantBack := HeaderCarrier{"bq_schema_version": "1", "bq_source_lang": "php", "bq_attempts": "0", "bq_app_id": "babelqueue", "traceparent": "tp"}
	if !reflect.DeepEqual(back, wantBack) {
		t.Errorf("Headers of a projection = %v, want %v", back, wantBack)
	}
}

func TestHeaderCarrier(t *testing.T) {
	h := HeaderCarrier{}
	if h.Get("missing") != "" {
		t.Errorf("Get of a missing key is not empty")
	}
	if keys := h.Keys(); keys == nil || len(keys) != 0 {
		t.Errorf("Keys of an empty carrier = %#v", keys)
	}
	h.Set("tracestate", "b")
	h.Set("traceparent", "a")
	h.Set("Baggage", "c")
	h.Set("traceparent", "a2")
	if got := h.Get("traceparent"); got != "a2" {
		t.Errorf("Get after a second Set = %q", got)
	}
	if got := strings.Join(h.Keys(), ","); got != "Baggage,traceparent,tracestate" {
		t.Errorf("Keys = %s, want sorted", got)
	}
	// The carrier goes straight into WithHeaders.
	msg := mustMessage(t, contractPHP(t), WithHeaders(h))
	if msg.ApplicationProperties["traceparent"] != "a2" || msg.ApplicationProperties["Baggage"] != "c" {
		t.Errorf("carrier headers not projected: %v", msg.ApplicationProperties)
	}
}

func TestHeadersFromContext(t *testing.T) {
	if h := HeadersFromContext(context.Background()); h == nil || len(h) != 0 {
		t.Errorf("outside a handler: %#v, want an empty carrier", h)
	}
	if m := MessageFromContext(context.Background()); m != nil {
		t.Errorf("MessageFromContext outside a handler = %v", m)
	}
	h := HeadersFromContext(context.WithValue(context.Background(), messageKey{}, (*amqp.Message)(nil)))
	if h == nil || len(h) != 0 {
		t.Errorf("with a nil message: %#v", h)
	}
	msg := &amqp.Message{ApplicationProperties: map[string]any{"traceparent": "tp", "n": int64(3), "blank": ""}}
	ctx := withMessage(context.Background(), msg)
	if got, want := HeadersFromContext(ctx), (HeaderCarrier{"traceparent": "tp", "n": "3"}); !reflect.DeepEqual(got, want) {
		t.Errorf("HeadersFromContext = %v, want %v", got, want)
	}
	if MessageFromContext(ctx) != msg {
		t.Errorf("MessageFromContext did not return the message")
	}
}

// sentEnvelope decodes and validates the body of a message a fake sender saw.
func sentEnvelope(t *testing.T, msg *amqp.Message) *Envelope {
	t.Helper()
	body, ok := msg.Value.(string)
	if !ok {
		t.Fatalf("sent body is a %T", msg.Value)
	}
	env, err := decodeValidate(body)
	if err != nil {
		t.Fatalf("sent body %s: %v", body, err)
	}
	return env
}

func TestPublisherPublish(t *testing.T) {
	ctx := context.Background()

	t.Run("accepted returns meta.id", func(t *testing.T) {
		s := &fakelink.Sender{Outcome: fakelink.Accept}
		p := NewPublisher(s, "orders")
		before := time.Now().UnixMilli()
		id, err := p.Publish(ctx, " urn:babel:orders:created ", orderCreated{OrderID: 1042, Customer: "ACME"})
		if err != nil {
			t.Fatal(err)
		}
		sent := s.Sent()
		if len(sent) != 1 || len(s.Kept()) != 1 {
			t.Fatalf("sent %d, kept %d; want 1, 1", len(sent), len(s.Kept()))
		}
		env := sentEnvelope(t, sent[0])
		assertUUIDv4(t, "returned id", id)
		assertUUIDv4(t, "trace_id", env.TraceID)
		if env.Meta.ID != id || sent[0].Properties.MessageID != id {
			t.Errorf("returned id %q, body meta.id %q, message-id %v", id, env.Meta.ID, sent[0].Properties.MessageID)
		}
		if env.Job != "urn:babel:orders:created" || env.Meta.Queue != "orders" || env.Meta.Lang != "go" ||
			env.Attempts != 0 || string(env.Data) != `{"order_id":1042,"customer":"ACME"}` || env.Meta.CreatedAt < before {
			t.Errorf("sent envelope %+v", env)
		}
		if sent[0].Properties.CorrelationID != env.TraceID {
			t.Errorf("correlation-id %v, trace_id %q", sent[0].Properties.CorrelationID, env.TraceID)
		}
		// The sent message is exactly the projection of its own envelope.
		if want := mustMessage(t, env); !reflect.DeepEqual(sent[0], want) {
			t.Errorf("sent message is not NewMessage(envelope):\n%s\nwant\n%s", renderMessage(t, sent[0]), renderMessage(t, want))
		}
	})

	t.Run("nil outcome func accepts", func(t *testing.T) {
		s := &fakelink.Sender{}
		if _, err := NewPublisher(s, "q").Publish(ctx, "urn:a:b", nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("trace id reuse", func(t *testing.T) {
		s := &fakelink.Sender{}
		id, err := NewPublisher(s, "orders").Publish(ctx, "urn:a:b", nil, WithTraceID("  "+contractTraceID+"\t"))
		if err != nil {
			t.Fatal(err)
		}
		env := sentEnvelope(t, s.Sent()[0])
		if env.TraceID != contractTraceID || s.Sent()[0].Properties.CorrelationID != contractTraceID {
			t.Errorf("trace_id %q correlation-id %v, want %q", env.TraceID, s.Sent()[0].Properties.CorrelationID, contractTraceID)
		}
		if id == contractTraceID {
			t.Errorf("meta.id equals the reused trace id")
		}
	})

	t.Run("blank trace id mints one", func(t *testing.T) {
		s := &fakelink.Sender{}
		if _, err := NewPublisher(s, "orders").Publish(ctx, "urn:a:b", nil, WithTraceID("   ")); err != nil {
			t.Fatal(err)
		}
		assertUUIDv4(t, "trace_id", sentEnvelope(t, s.Sent()[0]).TraceID)
	})

	t.Run("publisher options apply before per-call options", func(t *testing.T) {
		s := &fakelink.Sender{}
		p := NewPublisher(s, "orders", WithDuplicateDetection(), WithHeaders(map[string]string{"a": "pub", "b": "pub"}))
		id, err := p.Publish(ctx, "urn:a:b", map[string]int{"n": 1}, WithHeaders(map[string]string{"b": "call"}), withClock(fixedClock), WithDelay(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		m := s.Sent()[0]
		if m.ApplicationProperties[PropDuplicateID] != id || m.ApplicationProperties["a"] != "pub" || m.ApplicationProperties["b"] != "call" {
			t.Errorf("application properties %v", m.ApplicationProperties)
		}
		if m.Annotations[AnnotationDeliveryTime] != fixedClock.Add(time.Second).UnixMilli() {
			t.Errorf("x-opt-delivery-time %v", m.Annotations[AnnotationDeliveryTime])
		}
	})

	for _, tt := range []struct {
		name    string
		outcome func(context.Context, *amqp.Message) (amqp.DeliveryState, error)
		state   amqp.DeliveryState
	}{
		{"rejected", fakelink.Reject, &amqp.StateRejected{}},
		{"released", fakelink.Release, &amqp.StateReleased{}},
		{"modified", fakelink.Modify, &amqp.StateModified{}},
	} {
		t.Run(tt.name+" is ErrNotAccepted", func(t *testing.T) {
			s := &fakelink.Sender{Outcome: tt.outcome}
			id, err := NewPublisher(s, "orders").Publish(ctx, "urn:a:b", nil)
			if id != "" {
				t.Errorf("returned id %q for an outcome other than accepted", id)
			}
			if !errors.Is(err, ErrNotAccepted) {
				t.Fatalf("error %v does not match ErrNotAccepted", err)
			}
			var oe *OutcomeError
			if !errors.As(err, &oe) || reflect.TypeOf(oe.State) != reflect.TypeOf(tt.state) {
				t.Fatalf("error %v: OutcomeError %+v, want state %T", err, oe, tt.state)
			}
			if !strings.Contains(err.Error(), tt.name) || !strings.Contains(err.Error(), "orders") || !strings.Contains(err.Error(), "urn:a:b") {
				t.Errorf("error %q does not say %s, the queue and the URN", err, tt.name)
			}
			var ae *amqp.Error
			if tt.name == "rejected" {
				if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondResourceLimitExceeded {
					t.Errorf("rejected error does not unwrap to the broker's *amqp.Error: %v", err)
				}
			} else if errors.As(err, &ae) {
				t.Errorf("%s error unwraps to an *amqp.Error %v", tt.name, ae)
			}
			if len(s.Sent()) != 1 || len(s.Kept()) != 0 {
				t.Errorf("sent %d kept %d", len(s.Sent()), len(s.Kept()))
			}
		})
	}

	t.Run("link closed", func(t *testing.T) {
		s := &fakelink.Sender{Outcome: fakelink.Closed}
		id, err := NewPublisher(s, "orders").Publish(ctx, "urn:a:b", nil)
		var le *amqp.LinkError
		if id != "" || !errors.As(err, &le) {
			t.Errorf("Publish = %q, %v; want an *amqp.LinkError", id, err)
		}
		if errors.Is(err, ErrNotAccepted) {
			t.Errorf("a closed link is not a broker outcome: %v", err)
		}
	})

	t.Run("no outcome before the deadline", func(t *testing.T) {
		s := &fakelink.Sender{Outcome: fakelink.Hang}
		dctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel()
		id, err := NewPublisher(s, "orders").Publish(dctx, "urn:a:b", nil)
		if id != "" || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Publish = %q, %v; want context.DeadlineExceeded", id, err)
		}
	})

	for _, tt := range []struct {
		name string
		urn  string
		data any
	}{
		{"empty URN", "", nil},
		{"blank URN", " \t\n", map[string]int{"a": 1}},
		{"data not an object", "urn:a:b", []int{1}},
	} {
		t.Run(tt.name+" sends nothing", func(t *testing.T) {
			s := &fakelink.Sender{}
			id, err := NewPublisher(s, "orders").Publish(ctx, tt.urn, tt.data)
			if id != "" || !errors.Is(err, ErrInvalidEnvelope) {
				t.Errorf("Publish = %q, %v; want an ErrInvalidEnvelope", id, err)
			}
			if n := len(s.Sent()); n != 0 {
				t.Errorf("%d messages sent", n)
			}
		})
	}
}

func TestPublisherPublishEnvelope(t *testing.T) {
	ctx := context.Background()
	s := &fakelink.Sender{}
	env := contractPHP(t)
	env.Attempts = 2
	id, err := NewPublisher(s, "orders").PublishEnvelope(ctx, env, WithHeaders(map[string]string{"traceparent": "tp"}))
	if err != nil || id != contractMessageID {
		t.Fatalf("PublishEnvelope = %q, %v", id, err)
	}
	if want := mustMessage(t, env, WithHeaders(map[string]string{"traceparent": "tp"})); !reflect.DeepEqual(s.Sent()[0], want) {
		t.Errorf("sent\n%s\nwant\n%s", renderMessage(t, s.Sent()[0]), renderMessage(t, want))
	}

	rej := &fakelink.Sender{Outcome: fakelink.Reject}
	if id, err := NewPublisher(rej, "orders").PublishEnvelope(ctx, env); id != "" || !errors.Is(err, ErrNotAccepted) {
		t.Errorf("rejected: %q, %v", id, err)
	}
	none := &fakelink.Sender{}
	if id, err := NewPublisher(none, "orders").PublishEnvelope(ctx, &Envelope{Job: " "}); id != "" || !errors.Is(err, ErrInvalidEnvelope) || len(none.Sent()) != 0 {
		t.Errorf("blank job: %q, %v, %d sent", id, err, len(none.Sent()))
	}
}

func TestOutcomeError(t *testing.T) {
	brokerErr := &amqp.Error{Condition: amqp.ErrCondResourceLimitExceeded, Description: "address full"}
	tests := []struct {
		name      string
		state     amqp.DeliveryState
		wantNil   bool
		msg       string
		unwrapped error
	}{
		{name: "accepted", state: &amqp.StateAccepted{}, wantNil: true},
		{name: "rejected with error", state: &amqp.StateRejected{Error: brokerErr}, msg: "rejected the transfer: *Error{Condition: amqp:resource-limit-exceeded, Description: address full", unwrapped: brokerErr},
		{name: "rejected bare", state: &amqp.StateRejected{}, msg: "broker rejected the transfer"},
		{name: "released", state: &amqp.StateReleased{}, msg: "released"},
		{name: "modified", state: &amqp.StateModified{DeliveryFailed: true}, msg: "modified the transfer (delivery-failed true, undeliverable-here false)"},
		{name: "modified undeliverable", state: &amqp.StateModified{UndeliverableHere: true}, msg: "delivery-failed false, undeliverable-here true"},
		{name: "received is not final", state: &amqp.StateReceived{}, msg: "StateReceived, not accepted"},
		{name: "no outcome", state: nil, msg: "without an outcome"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := outcomeError(tt.state)
			if tt.wantNil {
				if err != nil {
					t.Errorf("outcomeError = %v, want nil", err)
				}
				return
			}
			var oe *OutcomeError
			if !errors.As(err, &oe) || oe.State != tt.state {
				t.Fatalf("outcomeError = %#v, want an *OutcomeError holding the state", err)
			}
			if !errors.Is(err, ErrNotAccepted) {
				t.Errorf("%v does not match ErrNotAccepted", err)
			}
			if errors.Is(err, ErrInvalidEnvelope) || errors.Is(err, ErrDeadLetterFailed) {
				t.Errorf("%v matches an unrelated sentinel", err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("message %q does not contain %q", err, tt.msg)
			}
			if got := errors.Unwrap(err); got != tt.unwrapped { //nolint:errorlint // the identity of the direct cause is what is tested
				t.Errorf("Unwrap = %v, want %v", got, tt.unwrapped)
			}
		})
	}
}

// stateSender is an OutcomeSender returning a fixed outcome and error.
type stateSender struct {
	state amqp.DeliveryState
	err   error
	calls int
}

func (s *stateSender) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	panic("sendConfirmed must use SendOutcome on an OutcomeSender")
}

func (s *stateSender) SendOutcome(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
	s.calls++
	return s.state, s.err
}

func TestSendConfirmedOutcomeSender(t *testing.T) {
	ctx := context.Background()
	msg := mustMessage(t, contractPHP(t))
	sendErr := errors.New("connection reset")
	tests := []struct {
		name        string
		s           *stateSender
		notAccepted bool
		wantErr     error
	}{
		{name: "accepted", s: &stateSender{state: &amqp.StateAccepted{}}},
		{name: "rejected", s: &stateSender{state: &amqp.StateRejected{}}, notAccepted: true},
		{name: "released", s: &stateSender{state: &amqp.StateReleased{}}, notAccepted: true},
		{name: "modified", s: &stateSender{state: &amqp.StateModified{DeliveryFailed: true}}, notAccepted: true},
		{name: "nil state nil error", s: &stateSender{}, notAccepted: true},
		{name: "send error", s: &stateSender{err: sendErr}, wantErr: sendErr},
		{name: "send error wins over a state", s: &stateSender{state: &amqp.StateAccepted{}, err: sendErr}, wantErr: sendErr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := sendConfirmed(ctx, tt.s, msg)
			if tt.s.calls != 1 {
				t.Errorf("SendOutcome called %d times", tt.s.calls)
			}
			switch {
			case tt.notAccepted:
				if !errors.Is(err, ErrNotAccepted) {
					t.Errorf("sendConfirmed = %v, want ErrNotAccepted", err)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) || errors.Is(err, ErrNotAccepted) {
					t.Errorf("sendConfirmed = %v, want %v", err, tt.wantErr)
				}
			default:
				if err != nil {
					t.Errorf("sendConfirmed = %v, want nil", err)
				}
			}
		})
	}

	t.Run("fakelink sender", func(t *testing.T) {
		for name, out := range map[string]func(context.Context, *amqp.Message) (amqp.DeliveryState, error){
			"accept": fakelink.Accept, "reject": fakelink.Reject, "release": fakelink.Release, "modify": fakelink.Modify,
		} {
			s := &fakelink.Sender{Outcome: out}
			err := sendConfirmed(ctx, s, msg)
			if (name == "accept") != (err == nil) || (err != nil && !errors.Is(err, ErrNotAccepted)) {
				t.Errorf("%s: sendConfirmed = %v", name, err)
			}
			if len(s.Sent()) != 1 || s.Sent()[0] != msg {
				t.Errorf("%s: sent %v", name, s.Sent())
			}
		}
	})
}

// TestSendConfirmedPlainSenderTrustsSend documents a limitation: a Sender
// that is neither an OutcomeSender nor an *amqp.Sender (no SendWithReceipt)
// only has Send, which, like go-amqp's Send, returns nil for released and
// modified outcomes. sendConfirmed cannot see those, so they count as
// success; only a rejection or a link error fails.
func TestSendConfirmedPlainSenderTrustsSend(t *testing.T) {
	ctx := context.Background()
	msg := mustMessage(t, contractPHP(t))
	tests := []struct {
		name    string
		outcome func(context.Context, *amqp.Message) (amqp.DeliveryState, error)
		wantErr bool
	}{
		{"accepted is success", fakelink.Accept, false},
		{"released counts as success (limitation)", fakelink.Release, false},
		{"modified counts as success (limitation)", fakelink.Modify, false},
		{"rejected fails", fakelink.Reject, true},
		{"link closed fails", fakelink.Closed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &fakelink.Sender{Outcome: tt.outcome}
			err := sendConfirmed(ctx, fakelink.PlainSender{S: inner}, msg)
			if (err != nil) != tt.wantErr {
				t.Errorf("sendConfirmed = %v, want error %t", err, tt.wantErr)
			}
			if len(inner.Sent()) != 1 {
				t.Errorf("sent %d", len(inner.Sent()))
			}
			if tt.name == "rejected fails" {
				// The rejection comes back as Send's *amqp.Error, not an *OutcomeError.
				var ae *amqp.Error
				if !errors.As(err, &ae) || errors.Is(err, ErrNotAccepted) {
					t.Errorf("rejected through Send: %v", err)
				}
			}
		})
	}

	t.Run("publish through a plain sender returns the id on release (limitation)", func(t *testing.T) {
		inner := &fakelink.Sender{Outcome: fakelink.Release}
		id, err := NewPublisher(fakelink.PlainSender{S: inner}, "orders").Publish(ctx, "urn:a:b", nil)
		if err != nil || id == "" {
			t.Errorf("Publish = %q, %v", id, err)
		}
		if len(inner.Kept()) != 0 {
			t.Errorf("the fake broker kept a released message")
		}
	})
}
