package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

var schemaDir = filepath.Join("..", "..", "testdata", "schemas")

// registryManifest is the family registry's example registry.json.
var registryManifest = filepath.Join("..", "..", "testdata", "registry", "registry.json")

func envelope(t *testing.T, urn, data string) (string, string) {
	t.Helper()
	env, err := artemis.NewEnvelope(urn, json.RawMessage(data), artemis.EnvelopeQueue("orders"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return string(b), env.Meta.ID
}

func runTool(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

func TestValidateAFileOfEnvelopes(t *testing.T) {
	valid, validID := envelope(t, "urn:babel:orders:created", `{"order_id":1042,"amount":9.5}`)
	invalid, invalidID := envelope(t, "urn:babel:orders:created", `{"orderId":1042,"amount":-1}`)
	other, otherID := envelope(t, "urn:babel:orders:shipped", `{"anything":true}`)
	file := filepath.Join(t.TempDir(), "records.json")
	// An array of envelopes, then a poison record and one more envelope
	// after it: a file may hold values one after another.
	content := "[" + valid + ",\n" + invalid + "]\n" + `{"raw":"not json","dead_letter":{"reason":"poison"}}` + "\n" + other + "\n"
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runTool(t, "", "-schemas", schemaDir, file)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (an invalid message)\n%s%s", code, out, errOut)
	}
	want := "#1 " + validID + " urn:babel:orders:created: valid\n" +
		"#2 " + invalidID + " urn:babel:orders:created: INVALID\n" +
		"    /amount: must be >= 0\n" +
		"    /orderId: is not allowed\n" +
		"    /order_id: is required\n" +
		"#3 (dead_letter poison): POISON (a consumer dead-letters it unread): artemis: invalid envelope: attempts is not an integer >= 0: it is missing\n"
	if !strings.HasPrefix(out, want) {
		t.Errorf("output\n%s\nwant it to start with\n%s", out, want)
	}
	if !strings.HasSuffix(out, "#4 "+otherID+" urn:babel:orders:shipped: no schema for this URN, not checked\n") {
		t.Errorf("output\n%s", out)
	}
	if errOut != "4 messages: 1 valid, 1 invalid, 1 without a schema, 1 poison, 0 version-gated\n" {
		t.Errorf("summary %q", errOut)
	}
}

func TestValidateStdinJSONLines(t *testing.T) {
	valid, _ := envelope(t, "urn:babel:orders:created", `{"order_id":1}`)
	invalid, id := envelope(t, "urn:babel:orders:created", `{"order_id":0}`)
	out, errOut, code := runTool(t, valid+"\n"+invalid+"\n", "-schemas", schemaDir, "-json")
	if code != 1 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), out)
	}
	var got result
	if err := json.Unmarshal([]byte(lines[1]), &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != id || got.Result != "invalid" || got.Source != "stdin" || got.Index != 2 ||
		len(got.Violations) != 1 || got.Violations[0] != (violation{Pointer: "/order_id", Message: "must be >= 1"}) {
		t.Errorf("line %s", lines[1])
	}
	if !strings.Contains(lines[0], `"result":"valid"`) {
		t.Errorf("line %s", lines[0])
	}
}

func TestValidateAllValidExitsZero(t *testing.T) {
	valid, _ := envelope(t, "urn:babel:orders:created", `{"order_id":1}`)
	dl := strings.TrimSuffix(valid, "}") + `,"dead_letter":{"reason":"failed","error":"x","exception":null,"failed_at":1,"original_queue":"orders","attempts":2,"lang":"go"}}`
	out, errOut, code := runTool(t, dl, "-schemas", schemaDir)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "(dead_letter failed): valid") {
		t.Errorf("output %q", out)
	}
}

func TestValidateUsageAndLoadErrors(t *testing.T) {
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "x.json"), []byte(`{"type":5}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"no -schemas", "", nil, "-schemas DIR or -registry FILE is required"},
		{"both sources", "", []string{"-schemas", schemaDir, "-registry", registryManifest}, "not both"},
		{"a bad registry", "", []string{"-registry", filepath.Join(bad, "x.json")}, `no "schemas" list`},
		{"missing directory", "", []string{"-schemas", filepath.Join(bad, "nope")}, "schema directory"},
		{"schema that does not compile", "", []string{"-schemas", bad}, "urn:babel:x"},
		{"input that is not JSON", "{oops", []string{"-schemas", schemaDir}, "stdin: not JSON"},
		{"missing file", "", []string{"-schemas", schemaDir, filepath.Join(bad, "none.json")}, "none.json"},
		{"unknown flag", "", []string{"-bogus"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runTool(t, tc.stdin, tc.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2\n%s%s", code, out, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q does not say %q", errOut, tc.want)
			}
		})
	}
}

// TestValidateAgainstTheRegistry checks the registry's example messages
// with its registry.json: each is valid under the URN its entry names.
func TestValidateAgainstTheRegistry(t *testing.T) {
	msgs := filepath.Join("..", "..", "testdata", "registry", "messages")
	bad, _ := envelope(t, "urn:babel:users:registered", `{"user_id":0,"email":"a"}`)
	out, errOut, code := runTool(t, bad, "-registry", registryManifest,
		filepath.Join(msgs, "order-created.json"), filepath.Join(msgs, "user-registered.json"), "-")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"urn:babel:orders:created", "urn:babel:users:registered", "/email: ", "/user_id: must be >= 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "3 messages: 2 valid, 1 invalid") {
		t.Errorf("stderr %q", errOut)
	}
}

// TestValidateWarnsOfRetiredURNs: a registry with a deprecated and a
// retired URN loads, and each is named on stderr.
func TestValidateWarnsOfRetiredURNs(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"registry.json": `{"schemas":[{"urn":"urn:babel:a:old","schema":"s.json","status":"retired","owner":"team-a"},` +
			`{"urn":"urn:babel:a:aging","schema":"s.json","status":"deprecated"}]}`,
		"s.json": `{"type":"object"}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	msg, _ := envelope(t, "urn:babel:a:old", `{}`)
	_, errOut, code := runTool(t, msg, "-registry", filepath.Join(dir, "registry.json"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"warning: urn:babel:a:aging is deprecated in the schema registry",
		"warning: urn:babel:a:old is retired in the schema registry (owner team-a)",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut)
		}
	}
}

// TestValidateAppliesTheConsumersRules: an envelope the consumer would
// poison is reported as poison with the consumer's reason, in a file as on
// -messages lines; a -messages line is one message, never split, so an
// array body is poison, not its elements.
func TestValidateAppliesTheConsumersRules(t *testing.T) {
	valid, validID := envelope(t, "urn:babel:orders:created", `{"order_id":1}`)
	var m map[string]any
	if err := json.Unmarshal([]byte(valid), &m); err != nil {
		t.Fatal(err)
	}
	without := func(key string) string {
		c := map[string]any{}
		for k, v := range m {
			c[k] = v
		}
		delete(c, key)
		b, _ := json.Marshal(c)
		return string(b)
	}
	v2 := strings.Replace(valid, `"schema_version":1`, `"schema_version":2`, 1)
	if v2 == valid {
		t.Fatal("no schema_version in the envelope")
	}
	poisons := []struct{ body, why string }{
		{without("meta"), "meta"},
		{without("trace_id"), "trace_id is missing"},
		{v2, "meta.schema_version is 2, want 1"},
	}

	// In a file: each envelope of an array is checked by the consumer's rules.
	var file strings.Builder
	file.WriteString("[" + valid)
	for _, p := range poisons {
		file.WriteString("," + p.body)
	}
	file.WriteString("]\n")
	out, errOut, code := runTool(t, file.String(), "-schemas", schemaDir)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || lines[0] != "#1 "+validID+" urn:babel:orders:created: valid" {
		t.Fatalf("output:\n%s", out)
	}
	for i, p := range poisons {
		if !strings.Contains(lines[i+1], "POISON (a consumer dead-letters it unread): ") || !strings.Contains(lines[i+1], p.why) {
			t.Errorf("line %d %q does not say poison: %s", i+2, lines[i+1], p.why)
		}
	}
	if errOut != "4 messages: 1 valid, 0 invalid, 0 without a schema, 3 poison, 0 version-gated\n" {
		t.Errorf("summary %q", errOut)
	}

	// -messages: one message a line, as bqartemis validate writes them.
	line := func(b browsed) string {
		out, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return string(out) + "\n"
	}
	in := line(browsed{Envelope: json.RawMessage(valid)}) +
		line(browsed{Refused: "poison", Error: "artemis: invalid envelope: the body is JSON but not an object: it is an array"}) +
		line(browsed{Refused: "version_gated", URN: "urn:babel:orders:created", Error: `bq_schema_version is "2", not "1"`}) +
		line(browsed{Envelope: json.RawMessage(v2)}) +
		"[" + valid + "]\n"
	out, errOut, code = runTool(t, in, "-schemas", schemaDir, "-messages", "-json")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d results, want 5 (a line is never split):\n%s", len(lines), out)
	}
	want := []struct{ result, err string }{
		{"valid", ""},
		{"poison", "it is an array"},
		{"version_gated", `bq_schema_version is \"2\"`},
		{"poison", "meta.schema_version is 2, want 1"},
		{"poison", "not a message line of bqartemis validate"},
	}
	for i, w := range want {
		if !strings.Contains(lines[i], `"result":"`+w.result+`"`) || !strings.Contains(lines[i], w.err) {
			t.Errorf("result %d: %s\nwant %s, %s", i+1, lines[i], w.result, w.err)
		}
	}
	if errOut != "5 messages: 1 valid, 0 invalid, 0 without a schema, 3 poison, 1 version-gated\n" {
		t.Errorf("summary %q", errOut)
	}
}
