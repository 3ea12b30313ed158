// The member decoders of the envelope and meta objects: the contract keys,
// the urn alias, unknown keys kept as they came.

package artemis

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
)

// decodeString decodes from a string so the consumer can pass an AMQP string
// body without copying it; every string field of the result is a substring.
func decodeString(s string) (*Envelope, error) {
	return decode(s)
}

// decode takes the fast path first: one pass that checks JSON syntax and
// UTF-8 while it walks the members. On any failure it decodes again from
// scratch by decodeChecked, which validates the whole body first, so every
// error is exactly the one those checks give, and a body the fast path
// cannot take is still decoded as before. Data always has memory of its
// own (s may be a string that must not be written through Data).
func decode(s string) (*Envelope, error) {
	if env, ok := decodeFast(s); ok {
		return env, nil
	}
	return decodeChecked(s)
}

// decodeFast is the one-pass decode; false means "take the checked path".
func decodeFast(s string) (*Envelope, bool) {
	start := jsoncodec.SkipSpace(s, 0)
	if start >= len(s) || s[start] != '{' {
		return nil, false
	}
	d := envelopeDecoder{env: &Envelope{}, urnIdx: -1}
	end, err := jsoncodec.WalkObject(s, start, d.walkMember)
	if err != nil || jsoncodec.SkipSpace(s, end) != len(s) {
		return nil, false
	}
	return d.finish(), true
}

// decodeChecked validates UTF-8 and JSON over the whole body before it
// walks the members, so its errors name the first problem in that order.
func decodeChecked(s string) (*Envelope, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("%w: the body is not valid UTF-8: at byte %d", ErrInvalidEnvelope, jsoncodec.InvalidUTF8At(s))
	}
	if strings.HasPrefix(s, "\ufeff") {
		// RFC 8259 lets a parser ignore a byte order mark; the envelope is
		// exchanged byte for byte, so a body that carries one is not canonical.
		return nil, fmt.Errorf("%w: the body is not valid JSON: at byte 1: it starts with a UTF-8 byte order mark (EF BB BF), which JSON text must not carry", ErrInvalidEnvelope)
	}
	if !json.Valid(jsoncodec.StringBytes(s)) {
		return nil, fmt.Errorf("%w: the body is not valid JSON: %w", ErrInvalidEnvelope, jsoncodec.SyntaxError(s))
	}
	start := jsoncodec.SkipSpace(s, 0)
	if start >= len(s) || s[start] != '{' {
		return nil, fmt.Errorf("%w: the body is JSON but not an object: it is %s", ErrInvalidEnvelope, jsoncodec.Kind(s[start:]))
	}
	d := envelopeDecoder{env: &Envelope{}, urnIdx: -1}
	if err := jsoncodec.EachMember(s, start, d.member); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEnvelope, err)
	}
	return d.finish(), nil
}

// envelopeDecoder collects the top-level members of one envelope.
type envelopeDecoder struct {
	env            *Envelope
	seen           uint8 // one bit per known key, to refuse duplicates
	urnAlias       string
	hasJob, hasURN bool
	urnIdx         int  // where urn sits in env.extra, -1 when absent
	noSchema       bool // meta came without schema_version
}

// newRawField keeps an unknown member in canonical form: the key and the
// value as they came when they are canonical already (the common case, no
// copy), else rewritten.
func newRawField(qkey, val string, clean bool) rawField {
	if strings.IndexByte(qkey, '\\') >= 0 {
		qkey = jsoncodec.CanonicalValue(qkey, false)
	}
	return rawField{key: qkey, value: jsoncodec.CanonicalValue(val, clean)}
}

// walkMember is the fast path's member: a meta object is checked and
// decoded in the same walk; any other value is checked, then decoded.
func (d *envelopeDecoder) walkMember(qkey, key, s string, i int) (int, error) {
	if key == "meta" && d.seen&(1<<4) == 0 && i < len(s) && s[i] == '{' {
		md := metaDecoder{m: &d.env.Meta}
		end, err := jsoncodec.WalkObject(s, i, func(qkey, key, s string, i int) (int, error) {
			return jsoncodec.ScanMember(qkey, key, s, i, 2, md.member)
		})
		d.seen |= 1 << 4
		d.noSchema = md.seen&(1<<3) == 0
		return end, err
	}
	return jsoncodec.ScanMember(qkey, key, s, i, 1, d.member)
}

func (d *envelopeDecoder) member(qkey, key, val string, clean bool) error {
	env := d.env
	var bit uint8
	switch key {
	case "job":
		bit = 1 << 0
		v, err := stringValue(val, clean, "job")
		if err != nil {
			return fmt.Errorf("the URN (job, else urn) is not a string: job is %s", truncate(val))
		}
		env.URN, d.hasJob = v, val != "null"
	case "urn":
		bit = 1 << 1
		v, err := stringValue(val, clean, "urn")
		if err != nil {
			return fmt.Errorf("the URN (job, else urn) is not a string: urn is %s", truncate(val))
		}
		d.urnAlias, d.hasURN = v, true
		// Kept in place as an unknown key until we know job is present.
		d.urnIdx = len(env.extra)
		env.extra = append(env.extra, newRawField(qkey, val, clean))
	case "trace_id":
		bit = 1 << 2
		v, err := stringValue(val, clean, "trace_id")
		if err != nil {
			return err
		}
		env.TraceID = v
	case "data":
		bit = 1 << 3
		c := jsoncodec.CanonicalValue(val, clean)
		env.Data = jsoncodec.StringBytes(c) // a copy: Data has its own memory
	case "meta":
		bit = 1 << 4
		if val[0] != '{' {
			return fmt.Errorf("meta is not an object: it is %s", truncate(val))
		}
		seen, err := env.Meta.decode(val)
		if err != nil {
			return err
		}
		d.noSchema = seen&(1<<3) == 0
	case "attempts":
		bit = 1 << 5
		n, ok := intValue(val)
		if !ok {
			env.issues = "attempts is not an integer >= 0: it is " + truncate(val)
		} else {
			env.Attempts = n
		}
	case "dead_letter":
		bit = 1 << 6
		if val != "null" {
			dl := &DeadLetter{}
			if err := json.Unmarshal(jsoncodec.StringBytes(val), dl); err != nil {
				return fmt.Errorf("dead_letter is not a valid block: %w", err)
			}
			env.DeadLetter = dl
		}
	default:
		env.extra = append(env.extra, newRawField(qkey, val, clean))
		return nil
	}
	if d.seen&bit != 0 {
		return fmt.Errorf("the body is JSON but not an envelope: duplicate key %s", qkey)
	}
	d.seen |= bit
	return nil
}

func (d *envelopeDecoder) finish() *Envelope {
	env := d.env
	if !d.hasJob && d.hasURN {
		// The alias becomes the job: producers always write job, never urn.
		env.URN = d.urnAlias
		env.extra = append(env.extra[:d.urnIdx], env.extra[d.urnIdx+1:]...)
	}
	if d.seen&(1<<5) == 0 && env.issues == "" {
		env.issues = "attempts is not an integer >= 0: it is missing"
	}
	if d.seen&(1<<4) == 0 && env.issues == "" {
		env.issues = "meta is not an object: it is missing"
	}
	if d.seen&(1<<4) != 0 && d.noSchema && env.issues == "" {
		env.issues = "meta.schema_version is missing, want 1"
	}
	if d.seen&(1<<3) == 0 && env.issues == "" {
		env.issues = "data is not an object: it is missing"
	}
	if env.Data != nil {
		env.Data = env.Data[:len(env.Data):len(env.Data)]
	}
	env.canon = env.Data
	return env
}

// decode fills m from the meta object s and says which known keys it held.
func (m *Meta) decode(s string) (seen uint8, err error) {
	md := metaDecoder{m: m}
	err = jsoncodec.EachMember(s, 0, md.member)
	return md.seen, err
}

// metaDecoder collects the members of one meta object.
type metaDecoder struct {
	m    *Meta
	seen uint8 // one bit per known key, to refuse duplicates
}

func (d *metaDecoder) member(qkey, key, val string, clean bool) error {
	m := d.m
	var bit uint8
	var err error
	switch key {
	case "id":
		bit = 1 << 0
		m.ID, err = stringValue(val, clean, "meta.id")
	case "queue":
		bit = 1 << 1
		m.Queue, err = stringValue(val, clean, "meta.queue")
	case "lang":
		bit = 1 << 2
		m.Lang, err = stringValue(val, clean, "meta.lang")
	case "schema_version":
		bit = 1 << 3
		// Only the literal integer 1 is version 1; "1", 1.0 and true are not.
		n, ok := intValue(val)
		if !ok {
			return fmt.Errorf("meta.schema_version is %s, want 1", truncate(val))
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
		m.addExtra(newRawField(qkey, val, clean))
		return nil
	}
	if err != nil {
		return err
	}
	if d.seen&bit != 0 {
		return fmt.Errorf("the body is JSON but not an envelope: duplicate key meta.%s", key)
	}
	d.seen |= bit
	return nil
}

// stringValue reads a JSON string; null reads as "". clean is the
// scanner's word that the value holds no escape (false when unknown).
func stringValue(val string, clean bool, name string) (string, error) {
	if val == "null" {
		return "", nil
	}
	if val[0] != '"' {
		return "", fmt.Errorf("%s is not a string: %s", name, truncate(val))
	}
	if clean {
		return val[1 : len(val)-1], nil
	}
	return jsoncodec.Unquote(val)
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

// Decode parses an envelope body. It resolves the urn alias (used when job
// is absent) and keeps unknown keys and the data object, both in canonical
// form (whitespace removed, strings re-escaped by the canonical rules,
// number literals untouched), but does not
// apply the consumer's acceptance rules: call Validate for that. It fails,
// wrapping ErrInvalidEnvelope, on anything that is not a JSON object of the
// envelope's shape: invalid UTF-8, invalid JSON, trailing bytes, known keys
// of the wrong JSON type, or a known key given twice.
func Decode(body []byte) (*Envelope, error) {
	// One private copy backs every string field; Data is a copy of its own,
	// so a caller writing to (or appending to) Data cannot reach the strings.
	return decode(string(body))
}
