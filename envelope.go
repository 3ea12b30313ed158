package artemis

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/google/uuid"
)

// SchemaVersion is the envelope schema version this library writes and accepts.
const SchemaVersion = 1

// Lang is the value this library writes into meta.lang and bq_source_lang.
const Lang = "go"

// Envelope is one BabelQueue message: the JSON object that travels as the body.
//
// Data holds the JSON of the data object in canonical form (CONTRACT.md
// section 1: no whitespace, strings without needless escapes, number
// literals exactly as received), so big integers and every value of the
// payload survive a decode and re-encode. Keys this library does not know,
// at the top level or in meta, are kept in their original order, in the
// same canonical form, and written back by Encode.
type Envelope struct {
	// Job is the message URN, for example "urn:babel:orders:created".
	Job string
	// TraceID is minted by the first producer and kept unchanged across hops.
	TraceID string
	// Data is the business payload: the JSON of an object. Decode and
	// NewEnvelope make it canonical; Encode writes any other JSON object
	// assigned here in canonical form too. (Bytes of a Decode or
	// NewEnvelope Data changed in place are not checked again: assign a
	// new slice instead.)
	Data json.RawMessage
	// Meta is the immutable metadata block.
	Meta Meta
	// Attempts is the retry counter. On a consumed envelope it is the
	// reconciled value: max(body attempts, AMQP delivery-count).
	Attempts int
	// DeadLetter is set only on envelopes that sit on a dead-letter queue.
	DeadLetter *DeadLetter

	extra  []rawField // unknown top-level keys, in input order
	issues string     // why Validate must fail, found while decoding
	// canon is the Data this library made canonical (Decode, NewEnvelope):
	// while Data is still that slice, Encode copies it as it is.
	canon json.RawMessage
}

// Meta is the envelope's metadata block.
type Meta struct {
	// ID is a fresh UUID v4 per message, distinct from the trace id.
	ID string
	// Queue is the logical queue name.
	Queue string
	// Lang names the SDK that produced the message ("go" for this library).
	Lang string
	// SchemaVersion is the envelope schema version; only 1 is accepted.
	SchemaVersion int
	// CreatedAt is the creation time in Unix epoch milliseconds (UTC).
	CreatedAt int64

	// extra holds the unknown meta keys, in input order; nil when there are
	// none (the common case), which keeps Envelope in a smaller allocation
	// size class than a slice header here would.
	extra *[]rawField
}

// extras returns the unknown meta keys, in input order.
func (m *Meta) extras() []rawField {
	if m.extra == nil {
		return nil
	}
	return *m.extra
}

// addExtra keeps an unknown meta key.
func (m *Meta) addExtra(f rawField) {
	if m.extra == nil {
		m.extra = new([]rawField)
	}
	*m.extra = append(*m.extra, f)
}

// rawField is an unknown member, kept as canonical JSON text.
type rawField struct {
	key   string // the quoted key
	value string // the JSON value
}

// EnvelopeOption configures NewEnvelope.
type EnvelopeOption func(*envelopeConfig)

type envelopeConfig struct {
	traceID string
	queue   string
	now     time.Time
}

// EnvelopeTraceID makes NewEnvelope reuse a trace id (trimmed) instead of
// minting one. A blank id still mints a fresh one.
func EnvelopeTraceID(id string) EnvelopeOption {
	return func(c *envelopeConfig) { c.traceID = id }
}

// EnvelopeQueue sets meta.queue, the logical queue name.
func EnvelopeQueue(queue string) EnvelopeOption {
	return func(c *envelopeConfig) { c.queue = queue }
}

// EnvelopeCreatedAt sets meta.created_at; the default is the current time.
func EnvelopeCreatedAt(t time.Time) EnvelopeOption {
	return func(c *envelopeConfig) { c.now = t }
}

// NewEnvelope makes a fresh envelope: a new UUID v4 meta.id, the trace id
// given with EnvelopeTraceID (trimmed) or a minted one, lang "go", schema
// version 1, created_at now in Unix ms and attempts 0.
//
// data may be a struct, a map, a json.RawMessage or nil (an empty object); it
// must encode to a JSON object. A blank URN is an error.
func NewEnvelope(urn string, data any, opts ...EnvelopeOption) (*Envelope, error) {
	var cfg envelopeConfig
	for _, o := range opts {
		o(&cfg)
	}
	env, err := newEnvelope(urn, data, &cfg)
	if err != nil {
		return nil, err
	}
	return env, nil
}

// newEnvelope is small enough to inline, so a caller that keeps the
// envelope to itself (Publisher.Publish) holds it on its stack. On an error
// the envelope is not nil but must not be used.
func newEnvelope(urn string, data any, cfg *envelopeConfig) (*Envelope, error) {
	env := new(Envelope)
	return env, env.fill(urn, data, cfg)
}

// fill makes e a fresh envelope; the publisher fills one on its stack.
func (e *Envelope) fill(urn string, data any, cfg *envelopeConfig) error {
	urn = strings.TrimSpace(urn)
	if urn == "" {
		return fmt.Errorf("%w: the URN is blank", ErrInvalidEnvelope)
	}
	if !utf8.ValidString(urn) {
		return fmt.Errorf("%w: the URN is not valid UTF-8", ErrInvalidEnvelope)
	}
	raw, err := marshalData(data)
	if err != nil {
		return err
	}
	traceID := strings.TrimSpace(cfg.traceID)
	if traceID != "" && !utf8.ValidString(traceID) {
		return fmt.Errorf("%w: the trace id is not valid UTF-8", ErrInvalidEnvelope)
	}
	id, minted := newIDs(traceID == "")
	if traceID == "" {
		traceID = minted
	}
	now := cfg.now
	if now.IsZero() {
		now = time.Now()
	}
	*e = Envelope{
		Job:     urn,
		TraceID: traceID,
		Data:    raw,
		canon:   raw,
		Meta: Meta{
			ID:            id,
			Queue:         cfg.queue,
			Lang:          Lang,
			SchemaVersion: SchemaVersion,
			CreatedAt:     now.UnixMilli(),
		},
	}
	return nil
}

// newIDs returns a fresh UUID v4 for meta.id and, when mintTrace is set,
// another for a trace id, both formatted into one allocation. They come
// from github.com/google/uuid, so uuid.SetRand and uuid.EnableRandPool
// apply; the trace id is drawn first.
func newIDs(mintTrace bool) (id, trace string) {
	const n = 36 // the length of a formatted UUID
	if !mintTrace {
		b := appendUUID(make([]byte, 0, n), uuid.Must(uuid.NewRandom()))
		return unsafe.String(&b[0], n), ""
	}
	t := uuid.Must(uuid.NewRandom())
	b := make([]byte, 0, 2*n)
	b = appendUUID(b, t)
	b = appendUUID(b, uuid.Must(uuid.NewRandom()))
	return unsafe.String(&b[n], n), unsafe.String(&b[0], n)
}

// appendUUID writes u in the canonical 8-4-4-4-12 lowercase form, as
// uuid.UUID.String does.
func appendUUID(b []byte, u uuid.UUID) []byte {
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return b
}

// URN returns the message URN (the job key, or its inbound alias urn).
func (e *Envelope) URN() string { return e.Job }

// Bind decodes the data object into v, as json.Unmarshal does.
func (e *Envelope) Bind(v any) error {
	if len(e.Data) == 0 {
		return json.Unmarshal([]byte("{}"), v)
	}
	return json.Unmarshal(e.Data, v)
}

// Validate reports whether a consumer accepts the envelope: a non-blank URN,
// schema_version exactly 1, data an object, attempts >= 0 and a non-blank
// trace id. The error wraps ErrInvalidEnvelope and says which rule fails in
// the contract's words ("data is not an object"), then the detail ("it is
// [1,2]").
func (e *Envelope) Validate() error {
	switch {
	case e == nil:
		return fmt.Errorf("%w: the envelope is nil", ErrInvalidEnvelope)
	case e.issues != "":
		return fmt.Errorf("%w: %s", ErrInvalidEnvelope, e.issues)
	case strings.TrimSpace(e.Job) == "":
		return fmt.Errorf("%w: the URN (job, else urn) is missing or blank", ErrInvalidEnvelope)
	case e.Meta.SchemaVersion != SchemaVersion:
		return fmt.Errorf("%w: meta.schema_version is %d, want %d", ErrInvalidEnvelope, e.Meta.SchemaVersion, SchemaVersion)
	case len(e.Data) == 0:
		return fmt.Errorf("%w: data is not an object: it is missing", ErrInvalidEnvelope)
	case !isJSONObject(e.Data):
		return fmt.Errorf("%w: data is not an object: it is %s", ErrInvalidEnvelope, truncate(string(e.Data)))
	case e.Attempts < 0:
		return fmt.Errorf("%w: attempts is not an integer >= 0: it is %d", ErrInvalidEnvelope, e.Attempts)
	case strings.TrimSpace(e.TraceID) == "":
		return fmt.Errorf("%w: trace_id is missing or blank", ErrInvalidEnvelope)
	}
	return nil
}

// Encode returns the canonical bytes of the envelope: keys in contract order
// (job, trace_id, data, meta, attempts, then unknown keys, then dead_letter),
// no whitespace, no HTML or slash escaping, non-ASCII written as UTF-8, and
// number literals as they came. A decoded envelope re-encodes canonically
// too, whatever whitespace and escapes its body had. Data that is not one
// JSON object in valid UTF-8 is an error wrapping ErrInvalidEnvelope.
func (e *Envelope) Encode() ([]byte, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: the envelope is nil", ErrInvalidEnvelope)
	}
	data, err := e.canonicalData()
	if err != nil {
		return nil, fmt.Errorf("%w: data %w", ErrInvalidEnvelope, err)
	}
	return e.appendEncodeData(make([]byte, 0, e.encodedSizeHint()), data), nil
}

// canonicalData is Data in canonical form, nil for no data.
func (e *Envelope) canonicalData() (json.RawMessage, error) {
	if len(e.Data) == 0 || e.dataIsCanon() {
		return e.Data, nil
	}
	return canonicalObject(e.Data)
}

// dataIsCanon reports whether Data is still the slice this library made
// canonical.
func (e *Envelope) dataIsCanon() bool {
	return len(e.Data) == len(e.canon) && unsafe.SliceData(e.Data) == unsafe.SliceData(e.canon)
}

func (e *Envelope) encodedSizeHint() int {
	n := 160 + len(e.Job) + len(e.TraceID) + len(e.Data) + len(e.Meta.ID) + len(e.Meta.Queue)
	for _, f := range e.extra {
		n += len(f.key) + len(f.value) + 2
	}
	for _, f := range e.Meta.extras() {
		n += len(f.key) + len(f.value) + 2
	}
	if e.DeadLetter != nil {
		n += 200
	}
	return n
}

// appendEncode is Encode for the library's own writers (publish, DLQ
// copies), which have checked Data already; Data that still fails the
// check is written as it is, as Encode would refuse it.
func (e *Envelope) appendEncode(b []byte) []byte {
	data, err := e.canonicalData()
	if err != nil {
		data = e.Data
	}
	return e.appendEncodeData(b, data)
}

func (e *Envelope) appendEncodeData(b []byte, data json.RawMessage) []byte {
	b = append(b, `{"job":`...)
	b = appendString(b, e.Job)
	b = append(b, `,"trace_id":`...)
	b = appendString(b, e.TraceID)
	b = append(b, `,"data":`...)
	if len(data) == 0 {
		b = append(b, "{}"...)
	} else {
		b = append(b, data...)
	}
	b = append(b, `,"meta":{"id":`...)
	b = appendString(b, e.Meta.ID)
	b = append(b, `,"queue":`...)
	b = appendString(b, e.Meta.Queue)
	b = append(b, `,"lang":`...)
	b = appendString(b, e.Meta.Lang)
	b = append(b, `,"schema_version":`...)
	b = strconv.AppendInt(b, int64(e.Meta.SchemaVersion), 10)
	b = append(b, `,"created_at":`...)
	b = strconv.AppendInt(b, e.Meta.CreatedAt, 10)
	b = appendRawFields(b, e.Meta.extras())
	b = append(b, `},"attempts":`...)
	b = strconv.AppendInt(b, int64(e.Attempts), 10)
	b = appendRawFields(b, e.extra)
	if e.DeadLetter != nil {
		b = append(b, `,"dead_letter":`...)
		b = e.DeadLetter.appendJSON(b)
	}
	return append(b, '}')
}

// The dead_letter reasons.
const (
	ReasonFailed     = "failed"
	ReasonUnknownURN = "unknown_urn"
	ReasonPoison     = "poison"
)

// DeadLetter is the block a dead-lettered envelope carries.
type DeadLetter struct {
	// Reason is failed, unknown_urn or poison.
	Reason string `json:"reason"`
	// Error is the error text, or nil.
	Error *string `json:"error"`
	// Exception is the error's Go type name, or nil.
	Exception *string `json:"exception"`
	// FailedAt is when the message was dead-lettered, in Unix ms.
	FailedAt int64 `json:"failed_at"`
	// OriginalQueue is the queue option, else the receiver's address.
	OriginalQueue string `json:"original_queue"`
	// Attempts is the reconciled attempts.
	Attempts int `json:"attempts"`
	// Lang is the SDK that dead-lettered it ("go").
	Lang string `json:"lang"`
}

func (d *DeadLetter) appendJSON(b []byte) []byte {
	b = append(b, `{"reason":`...)
	b = appendString(b, d.Reason)
	b = append(b, `,"error":`...)
	b = appendOptString(b, d.Error)
	b = append(b, `,"exception":`...)
	b = appendOptString(b, d.Exception)
	b = append(b, `,"failed_at":`...)
	b = strconv.AppendInt(b, d.FailedAt, 10)
	b = append(b, `,"original_queue":`...)
	b = appendString(b, d.OriginalQueue)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(d.Attempts), 10)
	b = append(b, `,"lang":`...)
	b = appendString(b, d.Lang)
	return append(b, '}')
}

func appendOptString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendString(b, *s)
}
