package main

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/google/uuid"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

const urn = "urn:babel:bench:order-created"

// payload is the data of every envelope; Pad makes it ≈1 KB.
type payload struct {
	OrderID  int     `json:"order_id"`
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
	Pad      string  `json:"pad"`
}

// fixtures returns the data of the library's envelopes, padded so the
// encoded envelope is about size bytes, and the raw side's k messages: the
// library's own projections of envelopes of the same data.
func fixtures(size, k int) (payload, []*amqp.Message, int, error) {
	data := payload{OrderID: 100000, Amount: 99.9, Currency: "USD"}
	env, err := artemis.NewEnvelope(urn, data, artemis.EnvelopeQueue("bench"))
	if err != nil {
		return data, nil, 0, err
	}
	body, err := env.Encode()
	if err != nil {
		return data, nil, 0, err
	}
	if pad := size - len(body); pad > 0 {
		data.Pad = strings.Repeat("x", pad)
	}
	msgs := make([]*amqp.Message, k)
	for i := range msgs {
		env, err = artemis.NewEnvelope(urn, data, artemis.EnvelopeQueue("bench"))
		if err != nil {
			return data, nil, 0, err
		}
		if msgs[i], err = artemis.NewMessage(env); err != nil {
			return data, nil, 0, err
		}
	}
	s, _ := msgs[0].Value.(string)
	return data, msgs, len(s), nil
}

// rawEnvelope and rawMeta are the envelope as a go-amqp user would write it
// with encoding/json, for -raw-json.
type rawEnvelope struct {
	Job      string  `json:"job"`
	TraceID  string  `json:"trace_id"`
	Data     payload `json:"data"`
	Meta     rawMeta `json:"meta"`
	Attempts int     `json:"attempts"`
}

type rawMeta struct {
	ID            string `json:"id"`
	Queue         string `json:"queue"`
	Lang          string `json:"lang"`
	SchemaVersion int    `json:"schema_version"`
	CreatedAt     int64  `json:"created_at"`
}

var rawContentType = artemis.ContentType

// buildRaw makes the message -raw-json sends: the same body, header,
// properties, application properties and annotations as the library's, but
// built by hand with encoding/json and github.com/google/uuid.
func buildRaw(data payload, queue string) (*amqp.Message, error) {
	now := time.Now()
	subject := urn
	env := rawEnvelope{Job: urn, TraceID: uuid.NewString(), Data: data,
		Meta: rawMeta{ID: uuid.NewString(), Queue: queue, Lang: artemis.Lang, SchemaVersion: artemis.SchemaVersion, CreatedAt: now.UnixMilli()}}
	body, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	created := time.UnixMilli(env.Meta.CreatedAt).UTC()
	return &amqp.Message{
		Header:      &amqp.MessageHeader{Durable: true, Priority: 4},
		Annotations: amqp.Annotations{artemis.AnnotationJMSType: urn},
		Properties: &amqp.MessageProperties{
			MessageID:     env.Meta.ID,
			CorrelationID: env.TraceID,
			ContentType:   &rawContentType,
			Subject:       &subject,
			CreationTime:  &created,
		},
		ApplicationProperties: map[string]any{
			artemis.PropSchemaVersion: "1",
			artemis.PropSourceLang:    artemis.Lang,
			artemis.PropAttempts:      "0",
			artemis.PropAppID:         artemis.AppID,
		},
		Value: string(body),
	}, nil
}
