package schema

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// gdprVectors is testdata/gdpr/vectors.json: data objects the Go core and
// the Python SDK protected (testdata/gdpr/SOURCE.md).
type gdprVectors struct {
	KeyHex string `json:"key_hex"`
	Cases  []struct {
		Name      string                     `json:"name"`
		Schema    string                     `json:"schema"`
		Cleartext json.RawMessage            `json:"cleartext"`
		Protected map[string]json.RawMessage `json:"protected"`
	} `json:"cases"`
}

func loadVectors(t *testing.T) (gdprVectors, Cipher) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "gdpr", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v gdprVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	key, err := hex.DecodeString(v.KeyHex)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewAESGCMCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("no vectors")
	}
	return v, c
}

// encryptingRegistry is one URN's schema (a file) with c.
func encryptingRegistry(t *testing.T, urn, schemaFile string, c Cipher) *Registry {
	t.Helper()
	doc, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := New(Bytes(urn, doc))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := reg.Encrypting(c)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

// shape replaces each string by its length: two protections of one value
// by one plaintext encoding have the same shape.
func shape(v any) any {
	switch v := v.(type) {
	case string:
		return len(v)
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			out[k] = shape(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = shape(x)
		}
		return out
	}
	return v
}

// TestGDPRReferenceVectors: this module decrypts what the Go core and the
// Python SDK encrypted, and what it encrypts has the Go core's shape (the
// same fields protected, each value's plaintext the same length) and
// decrypts back.
func TestGDPRReferenceVectors(t *testing.T) {
	v, c := loadVectors(t)
	const urn = "urn:babel:test:gdpr"
	for _, tc := range v.Cases {
		reg := encryptingRegistry(t, urn, filepath.Join("testdata", "gdpr", filepath.FromSlash(tc.Schema)), c)
		want := decodeAny(t, tc.Cleartext)
		for producer, protected := range tc.Protected {
			t.Run(tc.Name+"/"+producer, func(t *testing.T) {
				got, err := reg.UnprotectPayload(urn, protected)
				if err != nil {
					t.Fatalf("UnprotectPayload: %v", err)
				}
				if !reflect.DeepEqual(decodeAny(t, got), want) {
					t.Errorf("decrypted\n got: %s\nwant: %s", got, tc.Cleartext)
				}
			})
		}
		ours, err := reg.ProtectPayload(urn, tc.Cleartext)
		if err != nil {
			t.Fatal(err)
		}
		if want := shape(decodeAny(t, tc.Protected["go-core"])); !reflect.DeepEqual(shape(decodeAny(t, ours)), want) {
			t.Errorf("%s: protected\n got: %s\nthe Go core's: %s", tc.Name, ours, tc.Protected["go-core"])
		}
		back, err := reg.UnprotectPayload(urn, ours)
		if err != nil || !reflect.DeepEqual(decodeAny(t, back), want) {
			t.Errorf("%s: round trip: %s %v", tc.Name, back, err)
		}
	}
}

// TestGDPRThroughPublisherAndConsumer uses the registry's own example: the
// cleartext is validated before it is encrypted (an email too short is
// refused, nothing sent), the broker sees no personal data, the handler
// reads the cleartext; a consumer with another key dead-letters the
// message with reason failed and its data as it travelled, and nothing it
// reports shows the cleartext.
func TestGDPRThroughPublisherAndConsumer(t *testing.T) {
	manifest := filepath.Join(registryExamples, "registry.json")
	reg, err := New(RegistryFile(manifest))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reg.SensitiveFields("urn:babel:users:registered"), ", "); got !=
		"addresses[].line, email (email), phone, profile.full_name, profile.tckn (national_id)" {
		t.Errorf("SensitiveFields: %s", got)
	}
	key, _ := NewAESGCMCipher(testKey(7))
	enc, err := reg.Encrypting(key)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sender := &capturingSender{}
	pub := artemis.NewPublisher(sender, "identity", enc.PublishOption())
	msg := exampleEnvelope(t, "user-registered.json")
	if _, err := pub.Publish(ctx, artemis.Job(msg.URN, json.RawMessage(`{"user_id":1,"email":"ab"}`))); !errors.Is(err, artemis.ErrInvalidPayload) ||
		!strings.Contains(err.Error(), "/email: must be at least 3 characters long") {
		t.Fatalf("a short email: %v", err)
	}
	if _, err := pub.Publish(ctx, artemis.Job(msg.URN, msg.Data)); err != nil {
		t.Fatal(err)
	}
	if len(sender.msgs) != 1 {
		t.Fatalf("%d messages sent, want 1", len(sender.msgs))
	}
	body := string(bodyOf(t, sender.msgs[0]))
	for _, secret := range []string{"alice", "555 123", "Örnek", "12345678901", "Atatürk"} {
		if strings.Contains(body, secret) {
			t.Errorf("the body shows %q: %s", secret, body)
		}
	}
	for _, kept := range []string{`"locale":"tr-TR"`, `"user_id":7781`, `"country":"TR"`, `"marketing_opt_in":true`} {
		if !strings.Contains(body, kept) {
			t.Errorf("the body lost %s: %s", kept, body)
		}
	}

	var seen json.RawMessage
	handlers := artemis.Handlers{msg.URN: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		seen = env.Data
		return nil
	}}
	cons, err := artemis.NewConsumer(handlers, enc.ConsumerOption())
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Handle(ctx, &acceptingReceiver{}, sender.msgs[0]); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(decodeAny(t, seen), decodeAny(t, msg.Data)) {
		t.Errorf("the handler read\n%s\nwant\n%s", seen, msg.Data)
	}

	other, _ := NewAESGCMCipher(testKey(8))
	wrong, err := reg.Encrypting(other)
	if err != nil {
		t.Fatal(err)
	}
	dlq := &capturingSender{}
	var reported []error
	cons, err = artemis.NewConsumer(handlers, wrong.ConsumerOption(), artemis.WithDeadLetterSender(dlq), artemis.WithQueue("identity"),
		artemis.WithOnError(func(_ context.Context, err error, _ *artemis.Envelope, _ *amqp.Message) {
			reported = append(reported, err)
		}))
	if err != nil {
		t.Fatal(err)
	}
	seen = nil
	herr := cons.Handle(ctx, &acceptingReceiver{}, sender.msgs[0])
	if !errors.Is(herr, artemis.ErrDecrypt) || seen != nil || len(dlq.msgs) != 1 || len(reported) != 1 {
		t.Fatalf("wrong key: %v, handler ran %v, %d DLQ copies, %d reports", herr, seen != nil, len(dlq.msgs), len(reported))
	}
	var de *artemis.DeliveryError
	if !errors.As(reported[0], &de) || de.Kind != artemis.KindDecryptFailed {
		t.Errorf("reported %v", reported[0])
	}
	var wk *fieldError
	if !errors.As(herr, &wk) || !errors.Is(wk.err, ErrWrongKey) {
		t.Errorf("the cipher's error is not reachable: %v", herr)
	}
	record := string(bodyOf(t, dlq.msgs[0]))
	dead, err := artemis.Decode([]byte(record))
	if err != nil {
		t.Fatal(err)
	}
	if dead.DeadLetter.Reason != artemis.ReasonFailed || dead.DeadLetter.Error == nil ||
		*dead.DeadLetter.Error != "artemis: cannot decrypt a protected field: email: the cipher could not decrypt it" {
		t.Errorf("dead_letter %+v", dead.DeadLetter)
	}
	sent, err := artemis.Decode([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dead.Data, sent.Data) {
		t.Errorf("the DLQ copy's data is not the data as it travelled:\n%s\n%s", dead.Data, sent.Data)
	}
	for _, text := range []string{record, herr.Error(), reported[0].Error()} {
		if strings.Contains(text, "alice") || strings.Contains(text, "Atatürk") {
			t.Errorf("cleartext shown: %s", text)
		}
	}
}

// TestGDPRWithoutTheCipherFailsTheSchema is what a consumer without the
// cipher does with the Python SDK's message: an encrypted number is a
// string to the schema, so the message is dead-lettered as invalid; with
// the cipher it is handled.
func TestGDPRWithoutTheCipherFailsTheSchema(t *testing.T) {
	v, c := loadVectors(t)
	const urn = "urn:babel:test:gdpr"
	tc := v.Cases[1]
	doc, err := os.ReadFile(filepath.Join("testdata", "gdpr", tc.Schema))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(Bytes(urn, doc))
	if err != nil {
		t.Fatal(err)
	}
	err = plain.ValidatePayload(context.Background(), urn, tc.Protected["python-1.24.0"])
	if !errors.Is(err, artemis.ErrInvalidPayload) || !strings.Contains(err.Error(), "/salary: must be number, not string") {
		t.Fatalf("without the cipher: %v", err)
	}
	enc, err := plain.Encrypting(c)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := enc.UnprotectPayload(urn, tc.Protected["python-1.24.0"])
	if err != nil {
		t.Fatal(err)
	}
	if err := enc.ValidatePayload(context.Background(), urn, restored); err != nil {
		t.Errorf("with the cipher: %v", err)
	}
}

func TestGDPRMarks(t *testing.T) {
	c, _ := NewAESGCMCipher(testKey(3))
	const urn = "urn:babel:test:marks"
	t.Run("a mark under a marked container is covered by it", func(t *testing.T) {
		reg, err := New(Bytes(urn, []byte(`{"properties":{"customer":{"x-gdpr-sensitive":true,"properties":{
			"email":{"x-gdpr-sensitive":"email"}}},"id":{"type":"integer"}}}`)))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(reg.SensitiveFields(urn), ","); got != "customer" {
			t.Errorf("SensitiveFields %q", got)
		}
		enc, _ := reg.Encrypting(c)
		data := json.RawMessage(`{"id":1,"customer":{"name":"A","email":"a@b.c"}}`)
		p, err := enc.ProtectPayload(urn, data)
		if err != nil {
			t.Fatal(err)
		}
		back, err := enc.UnprotectPayload(urn, p)
		if err != nil || !reflect.DeepEqual(decodeAny(t, back), decodeAny(t, data)) {
			t.Errorf("round trip: %s %v (protected %s)", back, err, p)
		}
	})
	t.Run("absent, null-shaped and unprotected values", func(t *testing.T) {
		reg, _ := New(Bytes(urn, []byte(`{"properties":{"email":{"x-gdpr-sensitive":true},"tags":{"items":{"properties":{"v":{"x-gdpr-sensitive":true}}}}}}`)))
		enc, _ := reg.Encrypting(c)
		for _, data := range []string{`{}`, `{"tags":"not an array"}`, `{"tags":[1,{"w":2}]}`} {
			p, err := enc.ProtectPayload(urn, json.RawMessage(data))
			if err != nil || string(p) != data {
				t.Errorf("nothing to protect in %s: %s %v", data, p, err)
			}
		}
		// A marked value that is not a string was not encrypted: kept.
		got, err := enc.UnprotectPayload(urn, json.RawMessage(`{"email":42,"tags":[{"v":true}]}`))
		if err != nil || string(got) != `{"email":42,"tags":[{"v":true}]}` {
			t.Errorf("unencrypted values: %s %v", got, err)
		}
		// A string that does not decrypt is an ErrDecrypt naming the field.
		_, err = enc.UnprotectPayload(urn, json.RawMessage(`{"tags":[{"v":"x"},{"v":"plain text"}]}`))
		if !errors.Is(err, artemis.ErrDecrypt) || err.Error() != "artemis: cannot decrypt a protected field: tags[0].v: the cipher could not decrypt it" {
			t.Errorf("a clear string: %v", err)
		}
	})
	t.Run("marks the walk cannot reach are refused", func(t *testing.T) {
		for _, tc := range []struct{ schema, where string }{
			{`{"$defs":{"e":{"x-gdpr-sensitive":true}},"properties":{"email":{"$ref":"#/$defs/e"}}}`, "/$defs/e/x-gdpr-sensitive"},
			{`{"allOf":[{"properties":{"email":{"x-gdpr-sensitive":"email"}}}]}`, "/allOf/0/properties/email/x-gdpr-sensitive"},
			{`{"x-gdpr-sensitive":true,"properties":{}}`, "(the data object itself)"},
		} {
			reg, err := New(Bytes(urn, []byte(tc.schema)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := reg.Encrypting(c); err == nil || !strings.Contains(err.Error(), tc.where) ||
				!strings.Contains(err.Error(), "the field would travel in clear") {
				t.Errorf("%s: %v, want an error naming %s", tc.schema, err, tc.where)
			}
		}
		// A field named x-gdpr-sensitive, and a false or empty mark, mark nothing.
		reg, _ := New(Bytes(urn, []byte(`{"properties":{"x-gdpr-sensitive":{"type":"string"},"a":{"x-gdpr-sensitive":false},"b":{"x-gdpr-sensitive":""}}}`)))
		if _, err := reg.Encrypting(c); err != nil || len(reg.SensitiveFields(urn)) != 0 {
			t.Errorf("no mark: %v %q", err, reg.SensitiveFields(urn))
		}
		if _, err := reg.Encrypting(nil); err == nil {
			t.Error("Encrypting(nil) works")
		}
	})
}
