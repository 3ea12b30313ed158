package artemis

import (
	"bytes"
	"encoding/json"
	"errors"
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

// ErrInvalidEnvelope is wrapped by every error that Decode, Validate and
// NewEnvelope return for input that is not a valid envelope.
var ErrInvalidEnvelope = errors.New("babelqueue: invalid envelope")

// Envelope is one BabelQueue message: the JSON object that travels as the body.
//
// Data holds the raw JSON of the data object, so big integers and every byte
// of the payload survive a decode and re-encode. Keys this library does not
// know, at the top level or in meta, are kept in their original order and
// written back by Encode.
type Envelope struct {
	// Job is the message URN, for example "urn:babel:orders:created".
	Job string
	// TraceID is minted by the first producer and kept unchanged across hops.
	TraceID string
	// Data is the business payload: the raw JSON of an object.
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

	extra []rawField // unknown meta keys, in input order
}

// rawField is a key/value pair kept as the exact JSON text it arrived as.
type rawField struct {
	key   string // the quoted key, as it appeared in the input
	value string // the raw JSON value
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
// trace id. The error wraps ErrInvalidEnvelope and says what is wrong.
func (e *Envelope) Validate() error {
	switch {
	case e.issues != "":
		return fmt.Errorf("%w: %s", ErrInvalidEnvelope, e.issues)
	case strings.TrimSpace(e.Job) == "":
		return fmt.Errorf("%w: the URN (job, or urn) is missing or blank", ErrInvalidEnvelope)
	case e.Meta.SchemaVersion != SchemaVersion:
		return fmt.Errorf("%w: meta.schema_version is %d, want %d", ErrInvalidEnvelope, e.Meta.SchemaVersion, SchemaVersion)
	case !isJSONObject(e.Data):
		return fmt.Errorf("%w: data is not a JSON object", ErrInvalidEnvelope)
	case e.Attempts < 0:
		return fmt.Errorf("%w: attempts is %d, want >= 0", ErrInvalidEnvelope, e.Attempts)
	case strings.TrimSpace(e.TraceID) == "":
		return fmt.Errorf("%w: trace_id is missing or blank", ErrInvalidEnvelope)
	}
	return nil
}

// Encode returns the canonical bytes of the envelope: keys in contract order
// (job, trace_id, data, meta, attempts, then unknown keys, then dead_letter),
// no whitespace, no HTML or slash escaping, non-ASCII written as UTF-8.
func (e *Envelope) Encode() ([]byte, error) {
	if !isJSONObject(e.Data) && len(e.Data) != 0 {
		return nil, fmt.Errorf("%w: data is not a JSON object", ErrInvalidEnvelope)
	}
	return e.appendEncode(make([]byte, 0, e.encodedSizeHint())), nil
}

func (e *Envelope) encodedSizeHint() int {
	n := 160 + len(e.Job) + len(e.TraceID) + len(e.Data) + len(e.Meta.ID) + len(e.Meta.Queue)
	for _, f := range e.extra {
		n += len(f.key) + len(f.value) + 2
	}
	for _, f := range e.Meta.extra {
		n += len(f.key) + len(f.value) + 2
	}
	if e.DeadLetter != nil {
		n += 200
	}
	return n
}

func (e *Envelope) appendEncode(b []byte) []byte {
	b = append(b, `{"job":`...)
	b = appendString(b, e.Job)
	b = append(b, `,"trace_id":`...)
	b = appendString(b, e.TraceID)
	b = append(b, `,"data":`...)
	if len(e.Data) == 0 {
		b = append(b, "{}"...)
	} else {
		b = append(b, e.Data...)
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
	b = appendRawFields(b, e.Meta.extra)
	b = append(b, `},"attempts":`...)
	b = strconv.AppendInt(b, int64(e.Attempts), 10)
	b = appendRawFields(b, e.extra)
	if e.DeadLetter != nil {
		b = append(b, `,"dead_letter":`...)
		b = e.DeadLetter.appendJSON(b)
	}
	return append(b, '}')
}

func appendRawFields(b []byte, fields []rawField) []byte {
	for _, f := range fields {
		b = append(b, ',')
		b = append(b, f.key...)
		b = append(b, ':')
		b = append(b, f.value...)
	}
	return b
}

// Decode parses an envelope body. It resolves the urn alias (used when job
// is absent) and keeps unknown keys and the raw data object, but does not
// apply the consumer's acceptance rules: call Validate for that. It fails,
// wrapping ErrInvalidEnvelope, on anything that is not a JSON object of the
// envelope's shape: invalid UTF-8, invalid JSON, trailing bytes, known keys
// of the wrong JSON type, or a known key given twice.
func Decode(body []byte) (*Envelope, error) {
	// One private copy backs every string field and Data. Data is capped at
	// its own length and no string shares its bytes, so a caller writing to
	// (or appending to) Data cannot reach the strings.
	var s string
	if len(body) > 0 {
		buf := bytes.Clone(body)
		s = unsafe.String(&buf[0], len(buf))
	}
	return decode(s, false)
}

// decodeString decodes from a string so the consumer can pass an AMQP string
// body without copying it; every string field of the result is a substring.
func decodeString(s string) (*Envelope, error) {
	return decode(s, true)
}

// decode takes the fast path first: one pass that checks JSON syntax and
// UTF-8 while it walks the members. On any failure it decodes again from
// scratch by decodeChecked, which validates the whole body first, so every
// error is exactly the one those checks give, and a body the fast path
// cannot take is still decoded as before. copyData gives Data its own
// memory: s may be a string that must not be written through Data.
func decode(s string, copyData bool) (*Envelope, error) {
	if env, ok := decodeFast(s, copyData); ok {
		return env, nil
	}
	return decodeChecked(s, copyData)
}

// decodeFast is the one-pass decode; false means "take the checked path".
func decodeFast(s string, copyData bool) (*Envelope, bool) {
	start := skipSpace(s, 0)
	if start >= len(s) || s[start] != '{' {
		return nil, false
	}
	d := envelopeDecoder{env: &Envelope{}, urnIdx: -1}
	end, err := walkObject(s, start, d.walkMember)
	if err != nil || skipSpace(s, end) != len(s) {
		return nil, false
	}
	return d.finish(copyData), true
}

// decodeChecked validates UTF-8 and JSON over the whole body before it
// walks the members, so its errors name the first problem in that order.
func decodeChecked(s string, copyData bool) (*Envelope, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("%w: the body is not valid UTF-8", ErrInvalidEnvelope)
	}
	if strings.HasPrefix(s, "\ufeff") {
		// RFC 8259 lets a parser ignore a byte order mark; the envelope is
		// exchanged byte for byte, so a body that carries one is not canonical.
		return nil, fmt.Errorf("%w: the body starts with a UTF-8 byte order mark (EF BB BF), which JSON text must not carry", ErrInvalidEnvelope)
	}
	if !json.Valid(stringBytes(s)) {
		return nil, fmt.Errorf("%w: the body is not valid JSON: %w", ErrInvalidEnvelope, jsonSyntaxError(s))
	}
	start := skipSpace(s, 0)
	if start >= len(s) || s[start] != '{' {
		return nil, fmt.Errorf("%w: the body is JSON but not an object", ErrInvalidEnvelope)
	}
	d := envelopeDecoder{env: &Envelope{}, urnIdx: -1}
	if err := eachMember(s, start, d.member); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEnvelope, err)
	}
	return d.finish(copyData), nil
}

// envelopeDecoder collects the top-level members of one envelope.
type envelopeDecoder struct {
	env            *Envelope
	seen           uint8 // one bit per known key, to refuse duplicates
	urnAlias       string
	hasJob, hasURN bool
	urnIdx         int // where urn sits in env.extra, -1 when absent
}

// walkMember is the fast path's member: a meta object is checked and
// decoded in the same walk; any other value is checked, then decoded.
func (d *envelopeDecoder) walkMember(qkey, key, s string, i int) (int, error) {
	if key == "meta" && d.seen&(1<<4) == 0 && i < len(s) && s[i] == '{' {
		md := metaDecoder{m: &d.env.Meta}
		end, err := walkObject(s, i, func(qkey, key, s string, i int) (int, error) {
			return scanMember(qkey, key, s, i, 2, md.member)
		})
		d.seen |= 1 << 4
		return end, err
	}
	return scanMember(qkey, key, s, i, 1, d.member)
}

func (d *envelopeDecoder) member(qkey, key, val string) error {
	env := d.env
	var bit uint8
	switch key {
	case "job":
		bit = 1 << 0
		v, err := stringValue(val, "job")
		if err != nil {
			return err
		}
		env.Job, d.hasJob = v, val != "null"
	case "urn":
		bit = 1 << 1
		v, err := stringValue(val, "urn")
		if err != nil {
			return err
		}
		d.urnAlias, d.hasURN = v, true
		// Kept in place as an unknown key until we know job is present.
		d.urnIdx = len(env.extra)
		env.extra = append(env.extra, rawField{key: qkey, value: val})
	case "trace_id":
		bit = 1 << 2
		v, err := stringValue(val, "trace_id")
		if err != nil {
			return err
		}
		env.TraceID = v
	case "data":
		bit = 1 << 3
		env.Data = stringBytes(val)
	case "meta":
		bit = 1 << 4
		if val[0] != '{' {
			return errors.New("meta is not an object")
		}
		if err := env.Meta.decode(val); err != nil {
			return err
		}
	case "attempts":
		bit = 1 << 5
		n, ok := intValue(val)
		if !ok {
			env.issues = "attempts is not an integer: " + truncate(val)
		} else {
			env.Attempts = n
		}
	case "dead_letter":
		bit = 1 << 6
		if val != "null" {
			dl := &DeadLetter{}
			if err := json.Unmarshal(stringBytes(val), dl); err != nil {
				return fmt.Errorf("dead_letter: %w", err)
			}
			env.DeadLetter = dl
		}
	default:
		env.extra = append(env.extra, rawField{key: qkey, value: val})
		return nil
	}
	if d.seen&bit != 0 {
		return fmt.Errorf("duplicate key %s", qkey)
	}
	d.seen |= bit
	return nil
}

func (d *envelopeDecoder) finish(copyData bool) *Envelope {
	env := d.env
	if !d.hasJob && d.hasURN {
		// The alias becomes the job: producers always write job, never urn.
		env.Job = d.urnAlias
		env.extra = append(env.extra[:d.urnIdx], env.extra[d.urnIdx+1:]...)
	}
	if d.seen&(1<<5) == 0 && env.issues == "" {
		env.issues = "attempts is missing"
	}
	if d.seen&(1<<4) == 0 && env.issues == "" {
		env.issues = "meta is missing"
	}
	if d.seen&(1<<3) == 0 && env.issues == "" {
		env.issues = "data is missing"
	}
	if env.Data != nil {
		if copyData {
			env.Data = append(json.RawMessage(nil), env.Data...)
		} else {
			env.Data = env.Data[:len(env.Data):len(env.Data)]
		}
	}
	return env
}

func (m *Meta) decode(s string) error {
	md := metaDecoder{m: m}
	return eachMember(s, 0, md.member)
}

// metaDecoder collects the members of one meta object.
type metaDecoder struct {
	m    *Meta
	seen uint8 // one bit per known key, to refuse duplicates
}

func (d *metaDecoder) member(qkey, key, val string) error {
	m := d.m
	var bit uint8
	var err error
	switch key {
	case "id":
		bit = 1 << 0
		m.ID, err = stringValue(val, "meta.id")
	case "queue":
		bit = 1 << 1
		m.Queue, err = stringValue(val, "meta.queue")
	case "lang":
		bit = 1 << 2
		m.Lang, err = stringValue(val, "meta.lang")
	case "schema_version":
		bit = 1 << 3
		// Only the literal integer 1 is version 1; "1", 1.0 and true are not.
		n, ok := intValue(val)
		if !ok {
			return fmt.Errorf("meta.schema_version is not an integer: %s", truncate(val))
		}
		m.SchemaVersion = n
	case "created_at":
		bit = 1 << 4
		if val == "null" {
			break
		}
		n, ok := int64Value(val)
		if !ok {
			return fmt.Errorf("meta.created_at is not an integer: %s", truncate(val))
		}
		m.CreatedAt = n
	default:
		m.extra = append(m.extra, rawField{key: qkey, value: val})
		return nil
	}
	if err != nil {
		return err
	}
	if d.seen&bit != 0 {
		return fmt.Errorf("duplicate key meta.%s", key)
	}
	d.seen |= bit
	return nil
}

// eachMember walks the members of the JSON object starting at s[start],
// which the caller has already checked to be valid JSON (so nesting deeper
// than the fast path's limit is fine: values are skipped, not scanned). It
// passes each key raw (quoted), unquoted, and the raw value text.
func eachMember(s string, start int, fn func(qkey, key, val string) error) error {
	_, err := walkObject(s, start, func(qkey, key, s string, i int) (int, error) {
		end := skipValue(s, i)
		return end, fn(qkey, key, s[i:end])
	})
	return err
}

// errScan is the fast path's only syntax error: the body is not valid JSON
// or not valid UTF-8. decodeChecked then finds out which, and says so.
var errScan = errors.New("invalid JSON")

// maxScanDepth bounds nesting on the fast path; it is below encoding/json's
// own limit, so a deeper body simply takes the checked path.
const maxScanDepth = 1000

// walkObject checks the JSON object starting at s[i] (a '{') for JSON syntax
// and UTF-8 as it walks it. For each member it calls fn with the raw
// (quoted) key, the unquoted key, and s with the index where the value
// starts; fn checks the value (scanMember does, for a plain one) and returns
// the index just past it. walkObject returns the index just past the object.
func walkObject(s string, i int, fn func(qkey, key, s string, i int) (int, error)) (int, error) {
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return 0, errScan
		}
		kEnd, escaped, ok := scanString(s, i)
		if !ok {
			return 0, errScan
		}
		qkey := s[i:kEnd]
		key := qkey[1 : len(qkey)-1]
		if escaped {
			var err error
			if key, err = unquote(qkey); err != nil {
				return 0, err
			}
		}
		i = skipSpace(s, kEnd)
		if i >= len(s) || s[i] != ':' {
			return 0, errScan
		}
		vEnd, err := fn(qkey, key, s, skipSpace(s, i+1))
		if err != nil {
			return 0, err
		}
		i = skipSpace(s, vEnd)
		if i >= len(s) {
			return 0, errScan
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, errScan
		}
	}
}

// scanMember checks the value starting at s[i], inside depth open objects,
// and hands its raw text to member.
func scanMember(qkey, key, s string, i, depth int, member func(qkey, key, val string) error) (int, error) {
	end, ok := scanValue(s, i, depth)
	if !ok {
		return 0, errScan
	}
	return end, member(qkey, key, s[i:end])
}

// scanValue returns the index just past the JSON value starting at s[i],
// inside depth open objects and arrays, and false when it is not valid JSON
// or its strings are not valid UTF-8. Only what follows a value (a comma, a
// closing bracket, the end) is left to the caller.
func scanValue(s string, i, depth int) (int, bool) {
	if i >= len(s) {
		return 0, false
	}
	switch c := s[i]; c {
	case '"':
		end, _, ok := scanString(s, i)
		return end, ok
	case '{', '[':
		if depth >= maxScanDepth {
			return 0, false
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = skipSpace(s, i+1)
		if i < len(s) && s[i] == closing {
			return i + 1, true
		}
		for {
			if c == '{' {
				if i >= len(s) || s[i] != '"' {
					return 0, false
				}
				end, _, ok := scanString(s, i)
				if !ok {
					return 0, false
				}
				i = skipSpace(s, end)
				if i >= len(s) || s[i] != ':' {
					return 0, false
				}
				i = skipSpace(s, i+1)
			}
			end, ok := scanValue(s, i, depth+1)
			if !ok {
				return 0, false
			}
			i = skipSpace(s, end)
			switch {
			case i >= len(s):
				return 0, false
			case s[i] == closing:
				return i + 1, true
			case s[i] != ',':
				return 0, false
			}
			i = skipSpace(s, i+1)
		}
	case 't':
		return scanLiteral(s, i, "true")
	case 'f':
		return scanLiteral(s, i, "false")
	case 'n':
		return scanLiteral(s, i, "null")
	}
	return scanNumber(s, i)
}

func scanLiteral(s string, i int, lit string) (int, bool) {
	if len(s)-i < len(lit) || s[i:i+len(lit)] != lit {
		return 0, false
	}
	return i + len(lit), true
}

// scanNumber checks JSON number syntax: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(s string, i int) (int, bool) {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i >= len(s):
		return 0, false
	case s[i] == '0':
		i++
	case s[i] >= '1' && s[i] <= '9':
		i = skipDigits(s, i+1)
	default:
		return 0, false
	}
	if i < len(s) && s[i] == '.' {
		j := skipDigits(s, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := skipDigits(s, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func skipDigits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// plainByte marks the bytes a JSON string holds as they are: printable
// ASCII other than the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString checks the JSON string starting at s[i] (a quote): valid
// escapes, no control characters, valid UTF-8. It returns the index just
// past the closing quote and whether the string holds an escape.
func scanString(s string, i int) (end int, escaped, ok bool) {
	j := i + 1
	for {
		for j < len(s) && plainByte[s[j]] {
			j++
		}
		if j >= len(s) {
			return 0, false, false
		}
		switch c := s[j]; {
		case c == '"':
			return j + 1, escaped, true
		case c == '\\':
			escaped = true
			if j+1 >= len(s) {
				return 0, false, false
			}
			switch s[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(s) || !isHex4(s[j+2:j+6]) {
					return 0, false, false
				}
				j += 6
			default:
				return 0, false, false
			}
		case c < 0x20:
			return 0, false, false
		default:
			r, size := utf8.DecodeRuneInString(s[j:])
			if r == utf8.RuneError && size == 1 {
				return 0, false, false
			}
			j += size
		}
	}
}

func isHex4(h string) bool {
	for i := 0; i < 4; i++ {
		c := h[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

func skipSpace(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the JSON string starting at s[i].
func skipString(s string, i int) int {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(s)
}

// skipValue returns the index just past the JSON value starting at s[i].
func skipValue(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case '"':
				j = skipString(s, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(s)
	default:
		j := i
		for j < len(s) {
			switch s[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return j
			}
			j++
		}
		return j
	}
}

func unquote(q string) (string, error) {
	if len(q) < 2 || q[0] != '"' {
		return "", fmt.Errorf("not a JSON string: %s", truncate(q))
	}
	body := q[1 : len(q)-1]
	if strings.IndexByte(body, '\\') < 0 {
		return body, nil
	}
	var out string
	if err := json.Unmarshal(stringBytes(q), &out); err != nil {
		return "", err
	}
	return out, nil
}

// stringValue reads a JSON string; null reads as "".
func stringValue(val, name string) (string, error) {
	if val == "null" {
		return "", nil
	}
	if val[0] != '"' {
		return "", fmt.Errorf("%s is not a string: %s", name, truncate(val))
	}
	return unquote(val)
}

// intValue accepts only JSON integer syntax that fits an int: no fraction,
// no exponent.
func intValue(val string) (int, bool) {
	n, ok := int64Value(val)
	if !ok || int64(int(n)) != n {
		return 0, false
	}
	return int(n), true
}

func int64Value(val string) (int64, bool) {
	// The common case, a short run of digits, without strconv.
	digits, neg := val, false
	if len(digits) > 0 && digits[0] == '-' {
		digits, neg = digits[1:], true
	}
	if len(digits) > 0 && len(digits) <= 18 {
		var n int64
		for i := 0; i < len(digits); i++ {
			c := digits[i]
			if c < '0' || c > '9' {
				return int64ValueSlow(val)
			}
			n = n*10 + int64(c-'0')
		}
		if neg {
			n = -n
		}
		return n, true
	}
	return int64ValueSlow(val)
}

func int64ValueSlow(val string) (int64, bool) {
	if val == "" || strings.ContainsAny(val, ".eE") || val[0] == '"' {
		return 0, false
	}
	n, err := strconv.ParseInt(val, 10, 64)
	return n, err == nil
}

func isJSONObject(raw []byte) bool {
	i := 0
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i < len(raw) && raw[i] == '{'
}

func truncate(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

func jsonSyntaxError(s string) error {
	var v any
	err := json.Unmarshal(stringBytes(s), &v)
	if err == nil {
		return errors.New("unexpected input")
	}
	// encoding/json stops at 10000 levels with the terse "invalid character
	// '[' exceeded max depth"; say what happened instead.
	var se *json.SyntaxError
	if errors.As(err, &se) && strings.HasSuffix(se.Error(), "exceeded max depth") {
		return fmt.Errorf("arrays and objects are nested more than 10000 levels deep (at byte %d)", se.Offset)
	}
	return err
}

// stringBytes views s as bytes for read-only use, without copying.
func stringBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// marshalData turns the publish-side data into the raw JSON of an object.
func marshalData(data any) (json.RawMessage, error) {
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
	b, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("%w: data: %w", ErrInvalidEnvelope, err)
	}
	if string(b) == "null" {
		// A nil map or a nil pointer: no payload, as an untyped nil is.
		return json.RawMessage("{}"), nil
	}
	if !isJSONObject(b) {
		return nil, fmt.Errorf("%w: data must encode to a JSON object, got %s", ErrInvalidEnvelope, truncate(string(b)))
	}
	return unescapeMarshal(b), nil
}

func rawObject(d json.RawMessage) (json.RawMessage, error) {
	if !json.Valid(d) {
		return nil, fmt.Errorf("%w: data is not valid JSON", ErrInvalidEnvelope)
	}
	if !utf8.Valid(d) {
		return nil, fmt.Errorf("%w: data is not valid UTF-8", ErrInvalidEnvelope)
	}
	if !isJSONObject(d) {
		return nil, fmt.Errorf("%w: data must be a JSON object", ErrInvalidEnvelope)
	}
	var buf bytes.Buffer
	buf.Grow(len(d))
	if err := json.Compact(&buf, d); err != nil {
		return nil, fmt.Errorf("%w: data: %w", ErrInvalidEnvelope, err)
	}
	return buf.Bytes(), nil
}

// unescapeMarshal undoes the escapes encoding/json adds that the canonical
// encoding forbids: \u003c \u003e \u0026 (HTML) and \u2028 \u2029. It works in
// place and only touches escapes that are not themselves escaped.
func unescapeMarshal(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u`)) {
		return b
	}
	out := b[:0]
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' || i+1 >= len(b) {
			out = append(out, c)
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			if r, ok := forbiddenEscape(b[i+2 : i+6]); ok {
				out = utf8.AppendRune(out, r)
				i += 5
				continue
			}
		}
		out = append(out, c, b[i+1])
		i++
	}
	return out
}

func forbiddenEscape(hex []byte) (rune, bool) {
	switch string(hex) {
	case "003c":
		return '<', true
	case "003e":
		return '>', true
	case "0026":
		return '&', true
	case "2028":
		return '\u2028', true
	case "2029":
		return '\u2029', true
	}
	return 0, false
}

var hexDigits = "0123456789abcdef"

// appendString writes s as a canonical JSON string: only the quote, the
// backslash and control characters are escaped; invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\ufffd"...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
