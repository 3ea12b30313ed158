// Poison: a body that is not a valid envelope goes to the dead-letter queue
// as a poison record (the body kept as it came), never retried.

package artemis

import (
	"encoding/base64"
	"encoding/json"
	"unicode/utf8"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
)

// poisonRecord builds the DLQ body for a body that is not a valid envelope:
//   - a JSON object: the original bytes with ,"dead_letter":{...} spliced in
//     before the closing brace ({} becomes {"dead_letter":{...}}), so the
//     original object bytes are a prefix of the record;
//   - any other valid UTF-8: {"raw":"<the body as a JSON string>","dead_letter":{...}};
//   - invalid UTF-8: {"raw":"<standard base64>","raw_encoding":"base64","dead_letter":{...}}.
func poisonRecord(body string, dl *DeadLetter) []byte {
	if !utf8.ValidString(body) {
		b := make([]byte, 0, base64.StdEncoding.EncodedLen(len(body))+256)
		b = append(b, `{"raw":"`...)
		b = base64.StdEncoding.AppendEncode(b, jsoncodec.StringBytes(body))
		b = append(b, `","raw_encoding":"base64","dead_letter":`...)
		b = dl.appendJSON(b)
		return append(b, '}')
	}
	if closing, empty, ok := objectBounds(body); ok {
		b := make([]byte, 0, len(body)+256)
		b = append(b, body[:closing]...)
		if empty {
			b = append(b, `"dead_letter":`...)
		} else {
			b = append(b, `,"dead_letter":`...)
		}
		b = dl.appendJSON(b)
		return append(b, body[closing:]...)
	}
	b := make([]byte, 0, len(body)+256)
	b = append(b, `{"raw":`...)
	b = jsoncodec.AppendString(b, body)
	b = append(b, `,"dead_letter":`...)
	b = dl.appendJSON(b)
	return append(b, '}')
}

// objectBounds reports whether body is one valid JSON object (whitespace
// around it allowed) and, if so, the index of its closing brace and whether
// the object has no members.
func objectBounds(body string) (closing int, empty, ok bool) {
	start := jsoncodec.SkipSpace(body, 0)
	if start >= len(body) || body[start] != '{' || !json.Valid(jsoncodec.StringBytes(body)) {
		return 0, false, false
	}
	closing = len(body) - 1
	for body[closing] != '}' {
		closing--
	}
	return closing, jsoncodec.SkipSpace(body, start+1) == closing, true
}

// poisonMessage is the DLQ message for a poison body: the record as an AMQP
// string value, the original annotations and application properties kept so
// the DLQ reader sees what arrived.
func poisonMessage(src *amqp.Message, record []byte, queue string) *amqp.Message {
	msg := forwardCopy(src, queue)
	msg.Data = nil
	msg.Sequence = nil
	msg.Value = string(record)
	if msg.Properties == nil {
		msg.Properties = &amqp.MessageProperties{}
	}
	msg.Properties.ContentType = &contentType
	msg.Properties.ContentEncoding = nil
	return msg
}

// poison settles a body that is not a valid envelope: a poison record on
// the DLQ, or dropped. It is never retried.
func (d *delivery) poison(body string, cause error) error {
	d.begin()
	if d.c.unknown == UnknownURNDelete || d.c.dlq == nil {
		return d.finish(KindPoison, cause, DispositionDropped, d.accept)
	}
	dl := newDeadLetter(ReasonPoison, cause, d.queue(), d.attempts, d.c.now())
	dl.Exception = nil
	return d.deadLetter(KindPoison, cause, poisonMessage(d.msg, poisonRecord(body, dl), d.queue()))
}
