package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The kinds of message a queue can hold, as the tool tells them apart.
const (
	kindEnvelope   = "envelope"    // a valid envelope without a dead_letter block
	kindDeadLetter = "dead_letter" // a valid envelope with a dead_letter block: redrivable
	kindPoison     = "poison"      // a poison record, or a body that is no valid envelope
	kindGated      = "gated"       // forwarded by the version gate: bq_schema_version is not "1"
)

// reasonGated is the reason inspect shows (and -reason matches) for a
// gated forward, which has no dead_letter block of its own.
const reasonGated = "gated"

// record is one message as inspect and peek print it: one JSON object per
// line with -json. Fields that do not apply are null (the dead-letter
// fields) or left out (the delivery details).
type record struct {
	Kind          string          `json:"kind"`
	Reason        *string         `json:"reason"`
	Error         *string         `json:"error"`
	Exception     *string         `json:"exception"`
	URN           string          `json:"urn"`
	MessageID     string          `json:"message_id"`
	TraceID       string          `json:"trace_id"`
	OriginalQueue *string         `json:"original_queue"`
	Attempts      int             `json:"attempts"`
	FailedAt      *int64          `json:"failed_at"` // Unix ms
	Problem       string          `json:"problem,omitempty"`
	Raw           *string         `json:"raw,omitempty"` // a poison record's original body
	RawEncoding   string          `json:"raw_encoding,omitempty"`
	SchemaVersion *string         `json:"bq_schema_version,omitempty"` // of a gated forward
	OrigAddress   string          `json:"orig_address,omitempty"`      // where the broker took it from (broker.go)
	OrigQueue     string          `json:"orig_queue,omitempty"`
	ExpiredAt     *int64          `json:"expired_at,omitempty"`    // Unix ms, when the broker expired it
	Body          json.RawMessage `json:"body"`                    // the JSON body, or a JSON string of a body that is not JSON
	BodyEncoding  string          `json:"body_encoding,omitempty"` // base64 when the body is not UTF-8
	Personal      *personal       `json:"personal,omitempty"`      // the x-gdpr-sensitive fields present (-schemas, -registry)
	Masked        bool            `json:"masked,omitempty"`        // the body's personal data is masked (-mask)

	// Delivery details (peek).
	DeliveryCount *uint32           `json:"delivery_count,omitempty"`
	DeliveryTime  *int64            `json:"delivery_time,omitempty"` // x-opt-delivery-time, Unix ms
	GroupID       string            `json:"group_id,omitempty"`
	TTL           *int64            `json:"ttl,omitempty"` // header ttl, ms
	Priority      *uint8            `json:"priority,omitempty"`
	Durable       *bool             `json:"durable,omitempty"`
	Annotations   map[string]any    `json:"annotations,omitempty"`
	Properties    map[string]string `json:"properties,omitempty"`

	env         *artemis.Envelope // the decoded envelope of a valid record
	brokerMsgID string            // x-opt-ORIG-MESSAGE-ID of a message the broker moved
}

// bodyText returns a message's body as bytes: an AMQP value that is a
// string or binary, or else its data sections joined. ok is false for any
// other body (sequence sections, another value type), which is poison.
func bodyText(msg *amqp.Message) (b []byte, ok bool) {
	switch v := msg.Value.(type) {
	case string:
		return []byte(v), true
	case []byte:
		return v, true
	case nil:
	default:
		return []byte(fmt.Sprint(v)), false
	}
	if len(msg.Data) == 0 {
		return nil, false
	}
	return bytes.Join(msg.Data, nil), true
}

// readRecord classifies one message and fills what can be read of it,
// with where the broker took it from when the broker moved it.
func readRecord(msg *amqp.Message) *record {
	r := classify(msg)
	brokerOrigin(msg, r)
	return r
}

func classify(msg *amqp.Message) *record {
	r := &record{MessageID: messageID(msg)}
	body, ok := bodyText(msg)
	r.Body, r.BodyEncoding = jsonBody(body)
	if sv, gated := gatedVersion(msg); gated {
		r.Kind, r.SchemaVersion = kindGated, &sv
		r.Reason = ptr(reasonGated)
		r.URN = routingURN(msg, nil)
		if env, err := artemis.Decode(body); err == nil {
			r.TraceID, r.Attempts = env.TraceID, env.Attempts
			if r.URN == "" {
				r.URN = env.URN
			}
		}
		return r
	}
	if !ok {
		r.Kind, r.Problem = kindPoison, "the body is no AMQP string, binary or data section"
		r.URN = routingURN(msg, nil)
		return r
	}
	env, err := artemis.Decode(body)
	if err != nil {
		r.Kind, r.Problem = kindPoison, err.Error()
		r.URN = routingURN(msg, nil)
		return r
	}
	r.URN = routingURN(msg, env)
	r.TraceID, r.Attempts = env.TraceID, env.Attempts
	if r.MessageID == "" {
		r.MessageID = env.Meta.ID
	}
	if dl := env.DeadLetter; dl != nil {
		r.Reason, r.Error, r.Exception = ptr(dl.Reason), dl.Error, dl.Exception
		r.OriginalQueue, r.FailedAt = ptr(dl.OriginalQueue), ptr(dl.FailedAt)
		r.Attempts = dl.Attempts
	}
	// A record is valid once the block is set aside: that is what a
	// redrive would publish.
	check := *env
	check.DeadLetter, check.Attempts = nil, 0
	if err := check.Validate(); err != nil || env.DeadLetter != nil && env.DeadLetter.Reason == artemis.ReasonPoison {
		r.Kind = kindPoison
		if err != nil && (env.DeadLetter == nil || env.DeadLetter.Reason != artemis.ReasonPoison) {
			r.Problem = err.Error() // not a poison record, yet no envelope
		}
		r.Raw, r.RawEncoding = rawOf(body)
		return r
	}
	r.env = env
	r.Kind = kindEnvelope
	if env.DeadLetter != nil {
		r.Kind = kindDeadLetter
	}
	return r
}

// withDelivery adds the delivery details peek shows.
func (r *record) withDelivery(msg *amqp.Message) *record {
	dc := uint32(0)
	if h := msg.Header; h != nil {
		dc = h.DeliveryCount
		r.Priority, r.Durable = ptr(h.Priority), ptr(h.Durable)
		if h.TTL > 0 {
			r.TTL = ptr(h.TTL.Milliseconds())
		}
	}
	r.DeliveryCount = &dc
	if p := msg.Properties; p != nil && p.GroupID != nil {
		r.GroupID = *p.GroupID
	}
	if len(msg.Annotations) > 0 {
		r.Annotations = map[string]any{}
		for k, v := range msg.Annotations {
			key := fmt.Sprint(k)
			r.Annotations[key] = annotationValue(v)
			if key == artemis.AnnotationDeliveryTime {
				switch t := v.(type) {
				case int64:
					r.DeliveryTime = ptr(t)
				case time.Time:
					r.DeliveryTime = ptr(t.UnixMilli())
				}
			}
		}
	}
	if len(msg.ApplicationProperties) > 0 {
		r.Properties = map[string]string{}
		for k, v := range msg.ApplicationProperties {
			if v != nil {
				r.Properties[k] = fmt.Sprint(v)
			}
		}
	}
	return r
}

func annotationValue(v any) any {
	switch t := v.(type) {
	case time.Time:
		return t.UnixMilli()
	case string, bool, int64, int32, int16, int8, uint64, uint32, uint16, uint8, float64, float32:
		return t
	default:
		return fmt.Sprint(v)
	}
}

// gatedVersion reports a bq_schema_version the version gate would stop:
// set, not blank, and not exactly the string "1".
func gatedVersion(msg *amqp.Message) (string, bool) {
	v, ok := msg.ApplicationProperties[artemis.PropSchemaVersion]
	if !ok || v == nil {
		return "", false
	}
	s, isString := v.(string)
	if isString && strings.Trim(s, " \t\r\n\f\v") == "" {
		return "", false
	}
	if isString && s == "1" {
		return "", false
	}
	return fmt.Sprint(v), true
}

// routingURN is the URN as a consumer routes on it: x-opt-jms-type, else
// the subject, else the body's.
func routingURN(msg *amqp.Message, env *artemis.Envelope) string {
	if s, ok := msg.Annotations[artemis.AnnotationJMSType].(string); ok && s != "" {
		return s
	}
	if p := msg.Properties; p != nil && p.Subject != nil && *p.Subject != "" {
		return *p.Subject
	}
	if env != nil {
		return env.URN
	}
	return ""
}

func messageID(msg *amqp.Message) string {
	if msg.Properties == nil || msg.Properties.MessageID == nil {
		return ""
	}
	return fmt.Sprint(msg.Properties.MessageID)
}

// jsonBody is the body as it goes into a JSON line: the JSON itself when it
// is valid JSON, else a JSON string of the text, else base64 of the bytes.
func jsonBody(body []byte) (json.RawMessage, string) {
	if len(body) > 0 && json.Valid(body) {
		var buf bytes.Buffer
		if json.Compact(&buf, body) == nil {
			return buf.Bytes(), ""
		}
	}
	if utf8.Valid(body) {
		b, _ := marshal(string(body))
		return b, ""
	}
	b, _ := marshal(base64.StdEncoding.EncodeToString(body))
	return b, "base64"
}

// rawOf returns the raw body a poison record keeps, and its encoding.
func rawOf(body []byte) (*string, string) {
	var rec struct {
		Raw         *string `json:"raw"`
		RawEncoding string  `json:"raw_encoding"`
	}
	if json.Unmarshal(body, &rec) != nil {
		return nil, ""
	}
	return rec.Raw, rec.RawEncoding
}

// marshal writes JSON without HTML escaping, as the envelope does.
// printJSONLines writes rows to w, one JSON object a line (the -json
// output of the listing commands).
func printJSONLines[T any](w io.Writer, rows []T) error {
	for _, r := range rows {
		b, err := marshal(r)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
			return err
		}
	}
	return nil
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func ptr[T any](v T) *T { return &v }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// textLine is the human form of a record: one line.
func (r *record) textLine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-11s", r.Kind)
	if r.Reason != nil {
		fmt.Fprintf(&b, " reason=%s", *r.Reason)
	}
	fmt.Fprintf(&b, " urn=%s id=%s", orDash(r.URN), orDash(r.MessageID))
	if r.TraceID != "" {
		fmt.Fprintf(&b, " trace=%s", r.TraceID)
	}
	fmt.Fprintf(&b, " attempts=%d", r.Attempts)
	if r.OriginalQueue != nil {
		fmt.Fprintf(&b, " from=%s", orDash(*r.OriginalQueue))
	}
	if r.OrigQueue != "" && (r.OriginalQueue == nil || *r.OriginalQueue != r.OrigQueue) {
		fmt.Fprintf(&b, " broker_from=%s", r.OrigQueue)
	}
	if r.ExpiredAt != nil {
		fmt.Fprintf(&b, " expired_at=%s", time.UnixMilli(*r.ExpiredAt).UTC().Format(time.RFC3339Nano))
	}
	if r.FailedAt != nil {
		fmt.Fprintf(&b, " failed_at=%s", time.UnixMilli(*r.FailedAt).UTC().Format(time.RFC3339Nano))
	}
	if r.DeliveryCount != nil {
		fmt.Fprintf(&b, " delivery_count=%d", *r.DeliveryCount)
	}
	if r.DeliveryTime != nil {
		fmt.Fprintf(&b, " deliver_at=%s", time.UnixMilli(*r.DeliveryTime).UTC().Format(time.RFC3339Nano))
	}
	if r.GroupID != "" {
		fmt.Fprintf(&b, " group=%s", r.GroupID)
	}
	if r.TTL != nil {
		fmt.Fprintf(&b, " ttl=%s", time.Duration(*r.TTL)*time.Millisecond)
	}
	if r.Priority != nil && *r.Priority != 4 {
		fmt.Fprintf(&b, " priority=%d", *r.Priority)
	}
	if r.SchemaVersion != nil {
		fmt.Fprintf(&b, " bq_schema_version=%q", *r.SchemaVersion)
	}
	if r.Exception != nil {
		fmt.Fprintf(&b, " exception=%s", *r.Exception)
	}
	if r.Error != nil {
		fmt.Fprintf(&b, " error=%q", short(*r.Error, 120))
	}
	switch {
	case r.Raw != nil:
		enc := ""
		if r.RawEncoding != "" {
			enc = " (" + r.RawEncoding + ")"
		}
		fmt.Fprintf(&b, " raw%s=%q", enc, short(*r.Raw, 80))
	case r.Kind == kindPoison || r.Kind == kindGated:
		fmt.Fprintf(&b, " body=%s", short(string(r.Body), 80))
	}
	if r.Problem != "" {
		fmt.Fprintf(&b, " problem=%q", short(r.Problem, 120))
	}
	if p := r.Personal; p != nil {
		if len(p.Encrypted) > 0 {
			fmt.Fprintf(&b, " personal_encrypted=%s", strings.Join(p.Encrypted, ","))
		}
		if len(p.Clear) > 0 {
			fmt.Fprintf(&b, " personal_in_clear=%s", strings.Join(p.Clear, ","))
		}
	}
	return b.String()
}

func short(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "..."
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
