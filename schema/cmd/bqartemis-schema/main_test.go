package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var examples = filepath.Join("..", "..", "testdata", "registry", "schemas")

func runTool(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestCheckTheRegistryExample runs the registry's own breaking example.
func TestCheckTheRegistryExample(t *testing.T) {
	v1 := filepath.Join(examples, "orders-created.json")
	v2 := filepath.Join(examples, "orders-created.v2-breaking.json")
	out, errOut, code := runTool("check", v1, v2)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	want := v1 + " -> " + v2 + ": 1 breaking change(s); mint a new URN instead:\n" +
		"  breaking: property \"customer_id\" is now required\n"
	if out != want {
		t.Errorf("output\n got: %q\nwant: %q", out, want)
	}
	out, _, code = runTool("check", v1, v1)
	if code != 0 || !strings.HasSuffix(out, ": backward compatible\n") {
		t.Errorf("a schema against itself: exit %d, %q", code, out)
	}
	out, _, code = runTool("check", "-json", v1, v2)
	if code != 1 || out != `{"compatible":false,"breaking":["property \"customer_id\" is now required"],"unchecked":[]}`+"\n" {
		t.Errorf("-json: exit %d, %q", code, out)
	}
}

func TestCheckStrictCountsUnchecked(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath := filepath.Join(dir, "old.json"), filepath.Join(dir, "new.json")
	for p, text := range map[string]string{oldPath: `{"type":"object"}`, newPath: `{"type":"object","allOf":[{"required":["a"]}]}`} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, _, code := runTool("check", oldPath, newPath)
	if code != 0 || !strings.Contains(out, "  review:   allOf changed: not compared by the rules, review it\n") {
		t.Errorf("exit %d, %q", code, out)
	}
	if _, _, code := runTool("check", "-strict", oldPath, newPath); code != 1 {
		t.Errorf("-strict: exit %d, want 1", code)
	}
}

func TestCheckUsageErrors(t *testing.T) {
	dir := t.TempDir()
	notSchema := filepath.Join(dir, "list.json")
	if err := os.WriteFile(notSchema, []byte(`[1]`), 0o600); err != nil {
		t.Fatal(err)
	}
	v1 := filepath.Join(examples, "orders-created.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: bqartemis-schema check"},
		{[]string{"compat", v1, v1}, "usage: bqartemis-schema check"},
		{[]string{"check", v1}, "want two schema files, OLD and NEW; got 1 arguments"},
		{[]string{"check", v1, filepath.Join(dir, "none.json")}, "none.json"},
		{[]string{"check", v1, notSchema}, "the new schema: a schema is a JSON object or a boolean"},
		{[]string{"check", "-bogus", v1, v1}, "flag provided but not defined"},
	} {
		out, errOut, code := runTool(tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want 2 and %q (stdout %q)", tc.args, code, errOut, tc.want, out)
		}
	}
}

// TestCheckTwoRegistries compares the registry's example with itself and
// with a registry that lost a URN, and refuses a registry against a schema.
func TestCheckTwoRegistries(t *testing.T) {
	manifest := filepath.Join("..", "..", "testdata", "registry", "registry.json")
	out, errOut, code := runTool("check", manifest, manifest)
	if code != 0 || !strings.HasSuffix(out, ": backward compatible\n") {
		t.Fatalf("exit %d %q %q", code, out, errOut)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "schemas"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(examples, "orders-created.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "schemas", "o.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(dir, "registry.json")
	if err := os.WriteFile(next, []byte(`{"schemas":[{"urn":"urn:babel:orders:created","schema":"schemas/o.json"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code = runTool("check", manifest, next)
	if code != 1 || !strings.Contains(out, `  breaking: urn:babel:users:registered: removed from the registry (give it "status": "retired" instead)`) {
		t.Errorf("exit %d %q", code, out)
	}
	_, errOut, code = runTool("check", manifest, filepath.Join(examples, "orders-created.json"))
	if code != 2 || !strings.Contains(errOut, "compare two of a kind") {
		t.Errorf("a registry against a schema: exit %d %q", code, errOut)
	}
}
