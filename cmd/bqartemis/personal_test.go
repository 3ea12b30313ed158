package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The schema registry's own example (vendored by the schema module).
var (
	exampleRegistry = filepath.Join("..", "..", "schema", "testdata", "registry", "registry.json")
	exampleMessage  = filepath.Join("..", "..", "schema", "testdata", "registry", "messages", "user-registered.json")
)

// exampleRecord reads the registry's user-registered message, its email
// and its second address line replaced by ciphertexts.
func exampleRecord(t *testing.T) *record {
	t.Helper()
	b, err := os.ReadFile(exampleMessage)
	if err != nil {
		t.Fatal(err)
	}
	env, err := artemis.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(env.Data, &data); err != nil {
		t.Fatal(err)
	}
	const ct = "7tcpi/KthBAm+6O98qyY2SpyMO26/YKFzAyl0leZbmI03yr/ZyC3lCfpFL8uPaQ=" // the Go core's, for an email
	data["email"] = ct
	data["addresses"] = append(data["addresses"].([]any), map[string]any{"line": ct, "country": "DE"})
	env.Data, _ = json.Marshal(data)
	body, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return readRecord(&amqp.Message{Value: string(body)})
}

func TestPersonalFieldsListedAndMasked(t *testing.T) {
	pf := personalFlags{registry: exampleRegistry}
	if err := pf.load(); err != nil {
		t.Fatal(err)
	}
	r := exampleRecord(t)
	pf.apply(r)
	if r.Personal == nil {
		t.Fatal("no personal data found")
	}
	if got := strings.Join(r.Personal.Encrypted, ","); got != "addresses[1].line,email" {
		t.Errorf("encrypted %q", got)
	}
	if got := strings.Join(r.Personal.Clear, ","); got != "addresses[0].line,phone,profile.full_name,profile.tckn" {
		t.Errorf("in clear %q", got)
	}
	if r.Masked || !strings.Contains(string(r.Body), "Alice Örnek") {
		t.Errorf("without -mask the body is changed: %s", r.Body)
	}
	line := r.textLine()
	if !strings.Contains(line, " personal_encrypted=addresses[1].line,email personal_in_clear=addresses[0].line,phone,profile.full_name,profile.tckn") {
		t.Errorf("text line %q", line)
	}

	pf.mask = true
	r = exampleRecord(t)
	pf.apply(r)
	if !r.Masked {
		t.Fatal("not masked")
	}
	body := string(r.Body)
	for _, secret := range []string{"Alice", "lice@", "555 123", "12345678901", "Atatürk", "7tcpi"} {
		if strings.Contains(body, secret) {
			t.Errorf("the masked body shows %q: %s", secret, body)
		}
	}
	for _, kept := range []string{`"email":"7***"`, `"full_name":"A***"`, `"tckn":"1***"`, `"line":"A***"`, `"locale":"tr-TR"`,
		`"user_id":7781`, `"marketing_opt_in":true`, `"job":"urn:babel:users:registered"`} {
		if !strings.Contains(body, kept) {
			t.Errorf("the masked body has no %s: %s", kept, body)
		}
	}
}

func TestPersonalFlagsFromADirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "users"), 0o755); err != nil {
		t.Fatal(err)
	}
	schema := `{"properties":{"card":{"type":"object","x-gdpr-sensitive":"payment","properties":{"pan":{"x-gdpr-sensitive":true}}},"n":{"type":"integer","x-gdpr-sensitive":true}}}`
	if err := os.WriteFile(filepath.Join(dir, "users", "registered.json"), []byte(schema), 0o600); err != nil {
		t.Fatal(err)
	}
	pf := personalFlags{schemas: dir, mask: true}
	if err := pf.load(); err != nil {
		t.Fatal(err)
	}
	env, err := artemis.NewEnvelope("urn:babel:users:registered", json.RawMessage(`{"card":{"pan":"4111"},"n":42,"other":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := env.Encode()
	r := readRecord(&amqp.Message{Value: string(body)})
	pf.apply(r)
	if r.Personal == nil || strings.Join(r.Personal.Clear, ",") != "card,n" || len(r.Personal.Encrypted) != 0 {
		t.Fatalf("personal %+v", r.Personal)
	}
	if !strings.Contains(string(r.Body), `"data":{"card":"***","n":"***","other":"x"}`) {
		t.Errorf("masked body %s", r.Body)
	}
}

func TestPersonalFlagsUsage(t *testing.T) {
	for _, tc := range []struct {
		pf   personalFlags
		want string
	}{
		{personalFlags{mask: true}, "-mask needs -schemas DIR or -registry FILE"},
		{personalFlags{schemas: "a", registry: "b"}, "not both"},
		{personalFlags{schemas: filepath.Join(t.TempDir(), "none")}, "schema directory"},
		{personalFlags{registry: filepath.Join(t.TempDir(), "registry.json")}, "registry.json"},
	} {
		if err := tc.pf.load(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.pf, err, tc.want)
		}
	}
	// No schemas: nothing listed, nothing changed.
	var pf personalFlags
	if err := pf.load(); err != nil {
		t.Fatal(err)
	}
	r := exampleRecord(t)
	pf.apply(r)
	if r.Personal != nil || r.Masked {
		t.Errorf("without schemas: %+v", r)
	}
}

// -mask masks a record that is no valid envelope too: a gated forward, an
// envelope that fails validation (its body), a poison record (its raw
// body); a body whose URN cannot be told is withheld.
func TestMaskCoversRecordsThatAreNoEnvelope(t *testing.T) {
	pf := maskingFlags(t)
	env, err := artemis.NewEnvelope("urn:babel:users:registered", json.RawMessage(`{"pan":"4111222233334444","n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := env.Encode()
	invalid := strings.Replace(string(body), `"trace_id":"`+env.TraceID+`"`, `"trace_id":""`, 1)
	poison, _ := json.Marshal(map[string]any{"raw": string(body), "dead_letter": map[string]any{"reason": "poison"}})
	poisonJSON := `{"raw":` + string(body) + `,"dead_letter":{"reason":"poison"}}`
	for name, msg := range map[string]*amqp.Message{
		"gated":       {Value: string(body), ApplicationProperties: map[string]any{artemis.PropSchemaVersion: "9"}},
		"invalid":     {Value: invalid},
		"no urn":      {Value: `{"data":{"pan":"4111222233334444"}}`},
		"no json":     {Value: `pan=4111222233334444`},
		"poison":      {Value: string(poison)},
		"poison json": {Value: poisonJSON},
	} {
		r := readRecord(msg)
		if r.env != nil {
			t.Fatalf("%s: a valid envelope", name)
		}
		pf.apply(r)
		out, _ := json.Marshal(r)
		if strings.Contains(string(out), "4111222233334444") {
			t.Errorf("%s: -mask shows the card number: %s", name, out)
		}
	}
}

// maskingFlags is -mask with a schema marking users:registered's pan.
func maskingFlags(t *testing.T) personalFlags {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "users"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "users", "registered.json"), []byte(`{"properties":{"pan":{"x-gdpr-sensitive":true}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	pf := personalFlags{schemas: dir, mask: true}
	if err := pf.load(); err != nil {
		t.Fatal(err)
	}
	return pf
}

// A body or raw body -mask withholds is the notice alone: a body that was
// base64 (not UTF-8) no longer says body_encoding base64, and a raw body,
// a string, holds the notice's text, not its JSON quotes (nor a
// raw_encoding).
func TestMaskWithheldBodyKeepsNoEncoding(t *testing.T) {
	pf := maskingFlags(t)
	const notice = "(withheld by -mask: no envelope whose personal data can be found)"

	r := readRecord(&amqp.Message{Data: [][]byte{{0xff, 'p', 'a', 'n'}}})
	if r.BodyEncoding != "base64" {
		t.Fatalf("set-up: body_encoding %q, want base64", r.BodyEncoding)
	}
	pf.apply(r)
	if string(r.Body) != `"`+notice+`"` || r.BodyEncoding != "" || !r.Masked {
		t.Errorf("body %s, body_encoding %q, masked %v: want the notice, no encoding", r.Body, r.BodyEncoding, r.Masked)
	}

	for name, raw := range map[string]string{
		"raw not JSON": `"raw":"pan=4111222233334444"`,
		"raw base64":   `"raw":"cGFuPTQxMTE=","raw_encoding":"base64"`,
	} {
		r := readRecord(&amqp.Message{Value: `{` + raw + `,"dead_letter":{"reason":"poison"}}`})
		if r.Raw == nil {
			t.Fatalf("%s: set-up: no raw body", name)
		}
		pf.apply(r)
		if *r.Raw != notice || r.RawEncoding != "" {
			t.Errorf("%s: raw %q, raw_encoding %q: want the notice, no encoding", name, *r.Raw, r.RawEncoding)
		}
	}
}

// TestPersonalSchemasReadNothingOutsideTheFolder: -schemas and -registry
// read through an os.Root: a relative link inside the folder is followed,
// one that leaves it is refused, so no mark comes from a file outside.
func TestPersonalSchemasReadNothingOutsideTheFolder(t *testing.T) {
	const marked = `{"properties":{"email":{"x-gdpr-sensitive":true}}}`
	outside := filepath.Join(t.TempDir(), "created.json")
	if err := os.WriteFile(outside, []byte(marked), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		link    func(orders string) string // the link's target, given the folder of the link
		refused bool
	}{
		{"a relative link inside", func(string) string { return filepath.Join("..", "inside.json.txt") }, false},
		{"a relative link out", func(orders string) string {
			rel, err := filepath.Rel(orders, outside)
			if err != nil {
				t.Fatal(err)
			}
			return rel
		}, true},
		{"an absolute link out", func(string) string { return outside }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			orders := filepath.Join(dir, "orders")
			manifest := `{"schemas":[{"urn":"urn:babel:orders:created","schema":"orders/created.json"}]}`
			if err := errors.Join(
				os.MkdirAll(orders, 0o700),
				os.WriteFile(filepath.Join(dir, "inside.json.txt"), []byte(marked), 0o600),
				os.WriteFile(filepath.Join(dir, "registry.json"), []byte(manifest), 0o600),
			); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(tc.link(orders), filepath.Join(orders, "created.json")); err != nil {
				t.Fatal(err)
			}
			checkLinkLoads(t, dir, tc.refused)
		})
	}
}

// checkLinkLoads loads dir's schemas by -schemas and by -registry and checks
// both read the linked schema (its marks present), or both refuse it.
func checkLinkLoads(t *testing.T, dir string, refused bool) {
	t.Helper()
	manifest := filepath.Join(dir, "registry.json")
	for name, pf := range map[string]*personalFlags{
		"-schemas":  {schemas: dir},
		"-registry": {registry: manifest},
	} {
		err := pf.load()
		switch {
		case refused && err == nil:
			t.Errorf("%s read a schema through a link out of the folder: marks %v", name, pf.marks)
		case !refused && err != nil:
			t.Errorf("%s: %v", name, err)
		case !refused && pf.marks["urn:babel:orders:created"] == nil:
			t.Errorf("%s: the linked schema's marks are missing: %v", name, pf.marks)
		}
	}
}
