package artemis

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
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
	// URN is the message URN, for example "urn:babel:orders:created": the
	// wire key job (a decoded envelope takes its inbound alias urn too).
	URN string
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

// EnvelopeOption configures an envelope being built: by NewEnvelope, or
// by Publish and PublishWithReceipt, which take it in Job.
type EnvelopeOption func(*envelopeConfig)

type envelopeConfig struct {
	traceID string
	queue   string
	now     time.Time
	// scratch, when set, is a buffer of a pooled message that struct data
	// is written into instead of an array of its own (see
	// Publisher.outgoing): grown when short, and kept for the next.
	scratch *[]byte
}

// EnvelopeTraceID makes the envelope reuse a trace id (trimmed) instead of
// minting one: it is how a service continues the trace of the message it
// is handling, given to NewEnvelope or to Publish. A blank id still mints a
// fresh one.
func EnvelopeTraceID(id string) EnvelopeOption {
	return func(c *envelopeConfig) { c.traceID = id }
}

// EnvelopeQueue sets meta.queue, the logical queue name. Publish sets it to
// the Publisher's queue; given to Publish, EnvelopeQueue replaces that.
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
	raw, err := marshalData(data, cfg.scratch)
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
		URN:     urn,
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
// another for a trace id, both formatted into one allocation, the trace id
// drawn first. Their randomness comes from the library's own batches of
// crypto/rand (idRandom), not from github.com/google/uuid's source: one
// read of the system's randomness serves many messages, and the package's
// process-wide settings (uuid.SetRand, uuid.EnableRandPool) stay the
// program's.
func newIDs(mintTrace bool) (id, trace string) {
	const n = 36 // the length of a formatted UUID
	var (
		r   [2 * 16]byte
		buf [2 * n]byte // formatted on the stack, then copied once into the strings
	)
	if !mintTrace {
		drawRandom(r[:16])
		return string(appendUUID(buf[:0], uuidV4(r[:16]))), ""
	}
	drawRandom(r[:])
	s := string(appendUUID(appendUUID(buf[:0], uuidV4(r[:16])), uuidV4(r[16:])))
	return s[n:], s[:n]
}

// uuidV4 makes 16 random bytes a UUID of version 4, variant RFC 4122, as
// uuid.NewRandom does.
func uuidV4(r []byte) uuid.UUID {
	u := uuid.UUID(r)
	u[6] = (u[6] & 0x0f) | 0x40
	u[8] = (u[8] & 0x3f) | 0x80
	return u
}

// randomBatch is how many bytes of crypto/rand one refill reads: 64 pairs
// of UUIDs. The bytes are wiped as they are used.
const randomBatch = 64 * 2 * 16

// randomSource is the library's batch of random bytes; off is the next
// unused one. A lock held for one copy of 16 or 32 bytes costs publishers
// on other cores far less than a read of crypto/rand each.
type randomSource struct {
	mu  sync.Mutex
	b   [randomBatch]byte
	off int
}

var idRandom = newRandomSource()

func newRandomSource() *randomSource { return &randomSource{off: randomBatch} }

// idRandomRead reads the system's randomness into a batch; tests replace
// it with a reader of their own (and a fresh idRandom).
var idRandomRead = rand.Read

// drawRandom fills dst (at most randomBatch bytes) with random bytes no
// other call gets, and wipes them from the batch.
func drawRandom(dst []byte) {
	rs := idRandom
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.off+len(dst) > randomBatch {
		if _, err := idRandomRead(rs.b[:]); err != nil {
			// crypto/rand.Read does not fail (it ends the program instead).
			panic(fmt.Sprintf("artemis: read random bytes: %v", err))
		}
		rs.off = 0
	}
	used := rs.b[rs.off : rs.off+len(dst)]
	copy(dst, used)
	clear(used)
	rs.off += len(dst)
}

// appendUUID writes u in the canonical 8-4-4-4-12 lowercase form, as
// uuid.UUID.String does.
func appendUUID(b []byte, u uuid.UUID) []byte {
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, jsoncodec.HexDigits[c>>4], jsoncodec.HexDigits[c&0xf])
	}
	return b
}

// Bind decodes the data object into v, as json.Unmarshal does. When v
// points to a struct whose fields are strings, bools, integers and floats
// (no embedded struct, no method of its own that decodes), Bind reads data
// itself, in one pass, and stores exactly what json.Unmarshal would; any
// other v, and any data json.Unmarshal would refuse, goes to json.Unmarshal.
func (e *Envelope) Bind(v any) error {
	data := e.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	if bindStruct(stringView(data), v) {
		return nil
	}
	return json.Unmarshal(data, v)
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
	case strings.TrimSpace(e.URN) == "":
		return fmt.Errorf("%w: the URN (job, else urn) is missing or blank", ErrInvalidEnvelope)
	case e.Meta.SchemaVersion != SchemaVersion:
		return fmt.Errorf("%w: meta.schema_version is %d, want %d", ErrInvalidEnvelope, e.Meta.SchemaVersion, SchemaVersion)
	case len(e.Data) == 0:
		return fmt.Errorf("%w: data is not an object: it is missing", ErrInvalidEnvelope)
	case !jsoncodec.IsObject(e.Data):
		return fmt.Errorf("%w: data is not an object: it is %s", ErrInvalidEnvelope, truncate(string(e.Data)))
	case e.Attempts < 0:
		return fmt.Errorf("%w: attempts is not an integer >= 0: it is %d", ErrInvalidEnvelope, e.Attempts)
	case strings.TrimSpace(e.TraceID) == "":
		return fmt.Errorf("%w: trace_id is missing or blank", ErrInvalidEnvelope)
	}
	return nil
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

// marshalData turns the publish-side data into the canonical JSON of an
// object. Struct data is written into *scratch when scratch is set (the
// result's array then is that buffer's, and stays its), else into an array
// of its own.
func marshalData(data any, scratch *[]byte) (json.RawMessage, error) {
	switch d := data.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		return rawObject(d)
	case *json.RawMessage:
		if d == nil {
			return json.RawMessage("{}"), nil
		}
		return rawObject(*d)
	}
	if scratch == nil {
		if b, ok := marshalStruct(data); ok {
			return b, nil
		}
	} else if b, ok := appendStruct((*scratch)[:0], data); ok {
		*scratch = b
		return b[:len(b):len(b)], nil // an append to Data never writes past it into the buffer
	}
	return marshalJSON(data)
}

// marshalJSON is marshalData through json.Marshal, its output made
// canonical.
func marshalJSON(data any) (json.RawMessage, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("%w: data: %w", ErrInvalidEnvelope, err)
	}
	if string(b) == "null" {
		// A nil map or a nil pointer: no payload, as an untyped nil is.
		return json.RawMessage("{}"), nil
	}
	if !jsoncodec.IsObject(b) {
		return nil, fmt.Errorf("%w: data must encode to a JSON object, got %s", ErrInvalidEnvelope, truncate(string(b)))
	}
	if err := jsoncodec.CheckMemberDepth(stringView(b)); err != nil { // the scan keeps nothing of it
		return nil, fmt.Errorf("%w: data %w", ErrInvalidEnvelope, err)
	}
	// json.Marshal output is compact, so only its escapes can differ from
	// the canonical form: \u003c \u003e \u0026 \u2028 \u2029 \ufffd of its
	// own, and whatever a json.RawMessage or a json.Marshaler inside data
	// carried (\u00e9, \/). No backslash, nothing to rewrite.
	if bytes.IndexByte(b, '\\') < 0 {
		return b, nil
	}
	return jsoncodec.AppendCanonical(make([]byte, 0, len(b)), stringView(b)), nil
}

// rawObject checks a publish-side json.RawMessage and returns it canonical.
func rawObject(d json.RawMessage) (json.RawMessage, error) {
	c, err := jsoncodec.CanonicalObject(d)
	if err != nil {
		return nil, fmt.Errorf("%w: data %w", ErrInvalidEnvelope, err)
	}
	return c, nil
}
