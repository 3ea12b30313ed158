package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// suiteDir is the conformance suite the library vendors byte for byte
// (its VERSION and the check of it are the root package's tests).
var suiteDir = filepath.Join("..", "testdata", "conformance")

// envelopeSchema compiles the suite's message-envelope.schema.json with
// its formats (uuid) asserted.
func envelopeSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	return compileSuiteSchema(t, "")
}

// compileSuiteSchema compiles the envelope schema, or the part of it at
// the JSON pointer ptr.
func compileSuiteSchema(t testing.TB, ptr string) *jsonschema.Schema {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(suiteDir, "schema", "message-envelope.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	const url = "message-envelope.schema.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url + "#" + ptr)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkEnvelope validates one body against the envelope schema.
func checkEnvelope(t *testing.T, s *jsonschema.Schema, what string, body []byte) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, body)
	}
	if err := s.Validate(doc); err != nil {
		t.Errorf("%s does not satisfy message-envelope.schema.json: %v\n%s", what, err, body)
	}
}

// bodyOf is the AMQP value body the library writes.
func bodyOf(t *testing.T, msg *amqp.Message) []byte {
	t.Helper()
	s, ok := msg.Value.(string)
	if !ok {
		t.Fatalf("the body is a %T, want the envelope as an AMQP string", msg.Value)
	}
	return []byte(s)
}

// capturingSender accepts and keeps every transfer.
type capturingSender struct {
	mu   sync.Mutex
	msgs []*amqp.Message
}

func (s *capturingSender) Send(_ context.Context, m *amqp.Message, _ *amqp.SendOptions) error {
	s.mu.Lock()
	s.msgs = append(s.msgs, m)
	s.mu.Unlock()
	return nil
}

// TestProducedEnvelopesSatisfyTheSuiteSchema checks what the library
// writes against the suite's envelope schema: a new envelope, a published
// message, each valid fixture of the manifest re-encoded (the urn alias
// comes out as job), and the dead-letter copies of each reason.
func TestProducedEnvelopesSatisfyTheSuiteSchema(t *testing.T) {
	s := envelopeSchema(t)
	c := loadConformance(t)
	for _, tc := range c.Cases {
		if !tc.Valid {
			continue
		}
		env, err := artemis.NewEnvelope(conformanceURN, tc.Data, artemis.EnvelopeQueue("orders"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		checkEnvelope(t, s, "NewEnvelope("+tc.Name+")", b)
	}

	sender := &capturingSender{}
	pub := artemis.NewPublisher(sender, "orders")
	if _, err := pub.Publish(context.Background(), artemis.Job("urn:babel:catalog:item.indexed", map[string]any{"title": "Café — naïve ☕", "ratio": 0.5, "note": nil})); err != nil {
		t.Fatal(err)
	}
	checkEnvelope(t, s, "a published message", bodyOf(t, sender.msgs[0]))

	var m struct {
		Cases []struct {
			Name  string `json:"name"`
			File  string `json:"file"`
			Valid bool   `json:"valid"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(readSuiteFile(t, "manifest.json"), &m); err != nil {
		t.Fatal(err)
	}
	fixtures := 0
	for _, tc := range m.Cases {
		if !tc.Valid {
			continue
		}
		fixtures++
		env, err := artemis.Decode(readSuiteFile(t, tc.File))
		if err != nil {
			t.Fatal(err)
		}
		b, err := env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		checkEnvelope(t, s, tc.Name+" re-encoded", b)
		msg, err := artemis.NewMessage(env)
		if err != nil {
			t.Fatal(err)
		}
		checkEnvelope(t, s, tc.Name+" as a message", bodyOf(t, msg))
	}
	if fixtures == 0 {
		t.Fatal("the manifest has no valid envelope case")
	}

	for _, dc := range []struct {
		reason string
		body   []byte
		opts   []artemis.ConsumerOption
	}{
		{"failed", readSuiteFile(t, "fixtures/order-created.json"), nil},
		{"unknown_urn", readSuiteFile(t, "fixtures/unicode-and-numbers.json"),
			[]artemis.ConsumerOption{artemis.WithUnknownURN(artemis.UnknownURNDeadLetter)}},
		{"poison", []byte(`{"not":"an envelope"`), nil},
	} {
		t.Run("dead-letter copy "+dc.reason, func(t *testing.T) {
			dlq := &capturingSender{}
			opts := append([]artemis.ConsumerOption{artemis.WithDeadLetterSender(dlq), artemis.WithMaxTries(1),
				artemis.WithQueue("orders"), artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {})}, dc.opts...)
			cons, err := artemis.NewConsumer(artemis.Handlers{conformanceURN: func(context.Context, *artemis.Envelope, *amqp.Message) error {
				return errors.New("the gateway timed out")
			}}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			msg := &amqp.Message{Value: string(dc.body)}
			_ = cons.Handle(context.Background(), &acceptingReceiver{}, msg)
			if len(dlq.msgs) != 1 {
				t.Fatalf("%d dead-letter copies, want 1", len(dlq.msgs))
			}
			body := bodyOf(t, dlq.msgs[0])
			if !strings.Contains(string(body), `"reason":"`+dc.reason+`"`) {
				t.Fatalf("the copy is not dead-lettered as %s: %s", dc.reason, body)
			}
			if dc.reason != "poison" {
				checkEnvelope(t, s, "the "+dc.reason+" dead-letter copy", body)
				return
			}
			// A poison record is no envelope (the body was none); its
			// dead_letter block is the schema's.
			var rec struct {
				DeadLetter json.RawMessage `json:"dead_letter"`
			}
			if err := json.Unmarshal(body, &rec); err != nil {
				t.Fatal(err)
			}
			checkEnvelope(t, compileSuiteSchema(t, "/properties/dead_letter"), "the poison record's dead_letter block", rec.DeadLetter)
		})
	}
}

// TestTheSuiteSchemaRefusesBrokenEnvelopes shows the check above can
// fail: the suite's invalid fixtures, and an envelope the library would
// never write, are refused by the schema.
func TestTheSuiteSchemaRefusesBrokenEnvelopes(t *testing.T) {
	s := envelopeSchema(t)
	for _, body := range [][]byte{
		readSuiteFile(t, "fixtures/invalid-missing-urn.json"),
		readSuiteFile(t, "fixtures/invalid-unknown-schema-version.json"),
		[]byte(`{"job":"urn:babel:a:b","trace_id":"not-a-uuid","data":{},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"q","lang":"go","schema_version":1,"created_at":1},"attempts":0}`),
		[]byte(`{"job":"urn:babel:a:b","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"q","lang":"go","schema_version":1,"created_at":1},"attempts":-1}`),
	} {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if s.Validate(doc) == nil {
			t.Errorf("the envelope schema takes %s", body)
		}
	}
}

func readSuiteFile(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(suiteDir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
