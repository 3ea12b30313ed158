package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func changeTexts(l []Change) string {
	out := make([]string, len(l))
	for i, c := range l {
		out[i] = c.String()
	}
	return strings.Join(out, " | ")
}

// TestCheckCompatibilityOnTheRegistryExample: the registry's own example
// of a breaking change (a new required customer_id) is told as exactly
// that; each example schema against itself is compatible.
func TestCheckCompatibilityOnTheRegistryExample(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(registryExamples, "schemas", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v1, v2 := read("orders-created.json"), read("orders-created.v2-breaking.json")
	c, err := CheckCompatibility(v1, v2)
	if err != nil {
		t.Fatal(err)
	}
	if got := changeTexts(c.Breaking); got != `property "customer_id" is now required` || c.Compatible() || len(c.Unchecked) != 0 {
		t.Errorf("orders-created -> v2-breaking: breaking %q, unchecked %q", got, changeTexts(c.Unchecked))
	}
	// Backwards (v2 -> v1) only relaxes: customer_id may no longer be
	// sent, but additionalProperties false then refuses it.
	c, err = CheckCompatibility(v2, v1)
	if err != nil {
		t.Fatal(err)
	}
	if got := changeTexts(c.Breaking); got != `property "customer_id" removed while additionalProperties is false` {
		t.Errorf("v2-breaking -> orders-created: %q", got)
	}
	for _, name := range []string{"orders-created.json", "orders-created.v2-breaking.json", "users-registered.json"} {
		if c, err := CheckCompatibility(read(name), read(name)); err != nil || !c.Compatible() || len(c.Unchecked) != 0 {
			t.Errorf("%s against itself: %+v %v", name, c, err)
		}
	}
}

func TestCheckCompatibilityRules(t *testing.T) {
	const base = `{"type":"object","required":["id"],"properties":{
		"id":{"type":"integer","minimum":1},
		"name":{"type":"string","minLength":1,"maxLength":40},
		"currency":{"enum":["USD","EUR","TRY"]},
		"tags":{"type":"array","items":{"type":"string"}},
		"profile":{"type":"object","properties":{"email":{"type":"string"}}}}}`
	edit := func(from, to string) string {
		if !strings.Contains(base, from) {
			t.Fatalf("the base schema has no %q", from)
		}
		return strings.Replace(base, from, to, 1)
	}
	for _, tc := range []struct {
		name, newSchema, breaking, unchecked string
	}{
		// The family's rules.
		{"a field made required", edit(`"required":["id"]`, `"required":["id","name"]`), `property "name" is now required`, ""},
		{"a type changed", edit(`"id":{"type":"integer"`, `"id":{"type":"string"`), `id: type changed "integer" → "string"`, ""},
		{"an enum value removed", edit(`["USD","EUR","TRY"]`, `["USD","EUR"]`), `currency: enum value "TRY" removed`, ""},
		{"additionalProperties tightened", edit(`{"type":"object","required"`, `{"type":"object","additionalProperties":false,"required"`),
			"additionalProperties tightened to false", ""},
		{"an enum added", edit(`"email":{"type":"string"}`, `"email":{"type":"string","enum":["a"]}`),
			"profile.email: enum constraint added where any value was allowed", ""},
		{"minLength tightened", edit(`"minLength":1`, `"minLength":2`), "name: minLength tightened 1 → 2", ""},
		{"minimum tightened", edit(`"minimum":1`, `"minimum":10`), "id: minimum tightened 1 → 10", ""},
		{"an array item retyped", edit(`"items":{"type":"string"}`, `"items":{"type":"integer"}`), `tags[]: type changed "string" → "integer"`, ""},
		// What this package adds.
		{"maxLength tightened", edit(`"maxLength":40`, `"maxLength":20`), "name: maxLength tightened 40 → 20", ""},
		{"a pattern added", edit(`"email":{"type":"string"}`, `"email":{"type":"string","pattern":"@"}`), `profile.email: pattern "@" added`, ""},
		{"a type constraint added", edit(`{"enum":["USD","EUR","TRY"]}`, `{"type":"string","enum":["USD","EUR","TRY"]}`),
			"currency: type constraint added (string) where any type was allowed", ""},
		{"a type dropped from a list", edit(`"id":{"type":"integer"`, `"id":{"type":["string","null"]`), `id: type "integer" no longer allowed`, ""},
		{"const added", edit(`"email":{"type":"string"}`, `"email":{"type":"string","const":"x"}`), `profile.email: const "x" added`, ""},
		{"uncompared keywords", edit(`"email":{"type":"string"}`, `"email":{"type":"string","format":"email","allOf":[{}]}`), "",
			"profile.email: allOf changed: not compared by the rules, review it | profile.email: format changed: not compared by the rules, review it"},
		// Compatible changes.
		{"an optional field added", edit(`"tags":`, `"note":{"type":"string"},"tags":`), "", ""},
		{"an enum widened", edit(`["USD","EUR","TRY"]`, `["USD","EUR","TRY","GBP"]`), "", ""},
		{"a required field dropped", edit(`"required":["id"]`, `"required":[]`), "", ""},
		{"integer widened to number", edit(`"id":{"type":"integer"`, `"id":{"type":"number"`), "", ""},
		{"a constraint relaxed", edit(`"minLength":1,"maxLength":40`, `"maxLength":80`), "", ""},
		{"x-gdpr-sensitive and a description", edit(`"email":{"type":"string"}`, `"email":{"type":"string","x-gdpr-sensitive":"email","description":"PII"}`), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := CheckCompatibility([]byte(base), []byte(tc.newSchema))
			if err != nil {
				t.Fatal(err)
			}
			if got := changeTexts(c.Breaking); got != tc.breaking {
				t.Errorf("breaking\n got: %q\nwant: %q", got, tc.breaking)
			}
			if got := changeTexts(c.Unchecked); got != tc.unchecked {
				t.Errorf("unchecked\n got: %q\nwant: %q", got, tc.unchecked)
			}
			if c.Compatible() != (tc.breaking == "") {
				t.Errorf("Compatible() = %v", c.Compatible())
			}
		})
	}
}

func TestCheckCompatibilityRefusesNonSchemas(t *testing.T) {
	for _, tc := range []struct{ old, new, want string }{
		{`{`, `{}`, "the old schema: not JSON"},
		{`{}`, `[1]`, "the new schema: a schema is a JSON object or a boolean, not [1]"},
		{`{} {}`, `{}`, "the old schema: not one JSON value"},
	} {
		if _, err := CheckCompatibility([]byte(tc.old), []byte(tc.new)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckCompatibility(%s, %s): %v, want %q", tc.old, tc.new, err, tc.want)
		}
	}
	c, err := CheckCompatibility([]byte(`true`), []byte(`false`))
	if err != nil || c.Compatible() {
		t.Errorf("true -> false: %+v %v, want a breaking change", c, err)
	}
}

// TestCheckRegistryCompatibility compares the registry's example with a
// next version that points orders:created at the breaking schema and
// drops users:registered.
func TestCheckRegistryCompatibility(t *testing.T) {
	oldManifest := filepath.Join(registryExamples, "registry.json")
	c, err := CheckRegistryCompatibility(oldManifest, oldManifest)
	if err != nil || !c.Compatible() || len(c.Unchecked) != 0 {
		t.Fatalf("the registry against itself: %+v %v", c, err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "schemas"), 0o755); err != nil {
		t.Fatal(err)
	}
	v2, err := os.ReadFile(filepath.Join(registryExamples, "schemas", "orders-created.v2-breaking.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "schemas", "orders.json"), v2, 0o600); err != nil {
		t.Fatal(err)
	}
	newManifest := filepath.Join(dir, "registry.json")
	if err := os.WriteFile(newManifest, []byte(`{"schemas":[{"urn":"urn:babel:orders:created","schema":"schemas/orders.json","owner":"orders"},`+
		`{"urn":"urn:babel:orders:shipped","schema":"schemas/orders.json"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = CheckRegistryCompatibility(oldManifest, newManifest)
	if err != nil {
		t.Fatal(err)
	}
	want := `urn:babel:orders:created: property "customer_id" is now required | ` +
		`urn:babel:users:registered: removed from the registry (give it "status": "retired" instead)`
	if got := changeTexts(c.Breaking); got != want {
		t.Errorf("breaking\n got: %q\nwant: %q", got, want)
	}
	if _, err := CheckRegistryCompatibility(oldManifest, filepath.Join(dir, "none.json")); err == nil {
		t.Error("a missing manifest is compared")
	}
}
