// Encoding: the envelope's canonical JSON, written in one pass (the
// dead_letter block and the unknown members kept from a decode included).

package artemis

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
)

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
	return jsoncodec.CanonicalObject(e.Data)
}

// dataIsCanon reports whether Data is still the slice this library made
// canonical.
func (e *Envelope) dataIsCanon() bool {
	if len(e.Data) != len(e.canon) {
		return false
	}
	if len(e.Data) == 0 {
		return (e.Data == nil) == (e.canon == nil)
	}
	return &e.Data[0] == &e.canon[0]
}

func (e *Envelope) encodedSizeHint() int {
	n := 160 + len(e.URN) + len(e.TraceID) + len(e.Data) + len(e.Meta.ID) + len(e.Meta.Queue)
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
	b = jsoncodec.AppendString(b, e.URN)
	b = append(b, `,"trace_id":`...)
	b = jsoncodec.AppendString(b, e.TraceID)
	b = append(b, `,"data":`...)
	if len(data) == 0 {
		b = append(b, "{}"...)
	} else {
		b = append(b, data...)
	}
	b = append(b, `,"meta":{"id":`...)
	b = jsoncodec.AppendString(b, e.Meta.ID)
	b = append(b, `,"queue":`...)
	b = jsoncodec.AppendString(b, e.Meta.Queue)
	b = append(b, `,"lang":`...)
	b = jsoncodec.AppendString(b, e.Meta.Lang)
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

func (d *DeadLetter) appendJSON(b []byte) []byte {
	b = append(b, `{"reason":`...)
	b = jsoncodec.AppendString(b, d.Reason)
	b = append(b, `,"error":`...)
	b = appendOptString(b, d.Error)
	b = append(b, `,"exception":`...)
	b = appendOptString(b, d.Exception)
	b = append(b, `,"failed_at":`...)
	b = strconv.AppendInt(b, d.FailedAt, 10)
	b = append(b, `,"original_queue":`...)
	b = jsoncodec.AppendString(b, d.OriginalQueue)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(d.Attempts), 10)
	b = append(b, `,"lang":`...)
	b = jsoncodec.AppendString(b, d.Lang)
	return append(b, '}')
}

func appendOptString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return jsoncodec.AppendString(b, *s)
}

// appendRawFields writes unknown members back; the decoder made their keys
// and values canonical already.
func appendRawFields(b []byte, fields []rawField) []byte {
	for _, f := range fields {
		b = append(b, ',')
		b = append(b, f.key...)
		b = append(b, ':')
		b = append(b, f.value...)
	}
	return b
}
