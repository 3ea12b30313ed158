package schema

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// registryExamples is the family registry's own examples folder, vendored
// (testdata/registry/SOURCE.md).
var registryExamples = filepath.Join("testdata", "registry")

// exampleEnvelope reads one of the registry's example messages.
func exampleEnvelope(t testing.TB, name string) *artemis.Envelope {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(registryExamples, "messages", name))
	if err != nil {
		t.Fatal(err)
	}
	env, err := artemis.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestRegistryFileTakesTheURNFromTheManifest loads the registry's example
// registry.json: each schema is known by the URN its entry names, not by
// its file's path (which, as a directory, names other URNs), and the
// example messages pass their schemas.
func TestRegistryFileTakesTheURNFromTheManifest(t *testing.T) {
	manifest := filepath.Join(registryExamples, "registry.json")
	fromFile, err := New(RegistryFile(manifest))
	if err != nil {
		t.Fatal(err)
	}
	fromFS, err := New(RegistryFS(os.DirFS(registryExamples), "registry.json"))
	if err != nil {
		t.Fatal(err)
	}
	byDir, err := New(Dir(filepath.Join(registryExamples, "schemas")))
	if err != nil {
		t.Fatal(err)
	}
	const want = "urn:babel:orders:created urn:babel:users:registered"
	for name, r := range map[string]*Registry{"RegistryFile": fromFile, "RegistryFS": fromFS} {
		if got := strings.Join(r.URNs(), " "); got != want {
			t.Errorf("%s: URNs %q, want %q", name, got, want)
		}
		e, ok := r.Entry("urn:babel:users:registered")
		if !ok || e.Owner != "identity" || e.Status != StatusActive || e.Schema != "schemas/users-registered.json" {
			t.Errorf("%s: entry %+v %v", name, e, ok)
		}
		if w := r.Warnings(); len(w) != 0 {
			t.Errorf("%s: warnings %q for a registry of active URNs", name, w)
		}
		for _, msg := range []string{"order-created.json", "user-registered.json"} {
			env := exampleEnvelope(t, msg)
			if !r.Has(env.URN) {
				t.Fatalf("%s: no schema for %s", name, env.URN)
			}
			if err := r.ValidatePayload(context.Background(), env.URN, env.Data); err != nil {
				t.Errorf("%s: the example %s: %v", name, msg, err)
			}
		}
		if err := r.ValidatePayload(context.Background(), "urn:babel:orders:created", json.RawMessage(`{"order_id":1}`)); !errors.Is(err, artemis.ErrInvalidPayload) ||
			!strings.Contains(err.Error(), "/amount: is required") {
			t.Errorf("%s: an order without its amount: %v", name, err)
		}
	}
	// What a directory of the same files loads: URNs from the paths.
	if got := strings.Join(byDir.URNs(), " "); !strings.Contains(got, "urn:babel:orders-created") || byDir.Has("urn:babel:orders:created") {
		t.Errorf("Dir of the registry's schemas: URNs %q", got)
	}
}

// writeRegistry writes a registry.json and its schema files in a new folder
// and returns the manifest's path.
func writeRegistry(t *testing.T, manifest string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["registry.json"] = manifest
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "registry.json")
}

const orderSchema = `{"type":"object","required":["order_id"],"properties":{"order_id":{"type":"integer","minimum":1}}}`

// TestRegistryStatuses: a deprecated URN works and is warned about; a
// retired one is refused on publish (nothing sent) and its queued messages
// are still checked and handled on consume.
func TestRegistryStatuses(t *testing.T) {
	manifest := writeRegistry(t, `{"schemas":[
		{"urn":"urn:babel:orders:created","schema":"schemas/order.json","owner":"orders","status":"retired"},
		{"urn":"urn:babel:orders:created.v2","schema":"schemas/order.json","owner":"orders","status":"active"},
		{"urn":"urn:babel:orders:placed","schema":"schemas/order.json","status":"deprecated"},
		{"urn":"urn:babel:orders:paid","schema":"schemas/order.json"}]}`,
		map[string]string{"schemas/order.json": orderSchema})
	reg, err := New(RegistryFile(manifest))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"urn:babel:orders:created is retired in the schema registry (owner orders): publishing it is refused, queued messages are still checked",
		"urn:babel:orders:placed is deprecated in the schema registry: its producers should move to its successor",
	}
	if got := reg.Warnings(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings\n got: %q\nwant: %q", got, want)
	}

	s := &countingSender{}
	pub := artemis.NewPublisher(s, "orders", reg.PublishOption())
	ctx := context.Background()
	_, err = pub.Publish(ctx, artemis.Job("urn:babel:orders:created", map[string]any{"order_id": 1}))
	if !errors.Is(err, artemis.ErrInvalidPayload) || !strings.Contains(err.Error(), "retired in the schema registry (owner orders): publish its successor") {
		t.Fatalf("publishing a retired URN: %v", err)
	}
	for _, urn := range []string{"urn:babel:orders:created.v2", "urn:babel:orders:placed", "urn:babel:orders:paid"} {
		if _, err := pub.Publish(ctx, artemis.Job(urn, map[string]any{"order_id": 1})); err != nil {
			t.Errorf("%s: %v", urn, err)
		}
		if _, err := pub.Publish(ctx, artemis.Job(urn, map[string]any{"order_id": 0})); !errors.Is(err, artemis.ErrInvalidPayload) {
			t.Errorf("%s with order_id 0: %v", urn, err)
		}
	}
	if s.n != 3 {
		t.Errorf("%d messages sent, want 3", s.n)
	}

	// A queued message of the retired URN is still checked and handled.
	handled := 0
	dlq := &capturingSender{}
	cons, err := artemis.NewConsumer(artemis.Handlers{"urn:babel:orders:created": func(context.Context, *artemis.Envelope, *amqp.Message) error {
		handled++
		return nil
	}}, reg.ConsumerOption(), artemis.WithDeadLetterSender(dlq), artemis.WithQueue("orders"),
		artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{`{"order_id":7}`, `{"order_id":0}`} {
		env, err := artemis.NewEnvelope("urn:babel:orders:created", json.RawMessage(data))
		if err != nil {
			t.Fatal(err)
		}
		msg, err := artemis.NewMessage(env)
		if err != nil {
			t.Fatal(err)
		}
		// The invalid one's settlement is reported as its error.
		_ = cons.Handle(ctx, &acceptingReceiver{}, msg)
	}
	if handled != 1 || len(dlq.msgs) != 1 {
		t.Errorf("retired URN on consume: %d handled, %d dead-lettered; want 1 and 1", handled, len(dlq.msgs))
	}
}

func TestRegistryFileRefusesBadManifests(t *testing.T) {
	schemas := func() map[string]string { return map[string]string{"schemas/order.json": orderSchema} }
	for _, tc := range []struct {
		name, manifest, want string
	}{
		{"not JSON", `{"schemas":[`, "not a registry manifest"},
		{"no schemas list", `{"urns":[]}`, `no "schemas" list`},
		{"no urn", `{"schemas":[{"schema":"schemas/order.json"}]}`, "entry 1: no urn"},
		{"no schema", `{"schemas":[{"urn":"urn:babel:a:b"}]}`, "entry 1 (urn:babel:a:b): no schema path"},
		{"unknown status", `{"schemas":[{"urn":"urn:babel:a:b","schema":"schemas/order.json","status":"activ"}]}`,
			`entry 1 (urn:babel:a:b): status "activ" is not active, deprecated or retired`},
		{"a URN twice", `{"schemas":[{"urn":"urn:babel:a:b","schema":"schemas/order.json"},{"urn":"urn:babel:a:b","schema":"schemas/order.json"}]}`,
			"urn:babel:a:b: two schemas for one URN"},
		{"outside the folder", `{"schemas":[{"urn":"urn:babel:a:b","schema":"../order.json"}]}`, "is not a path inside the manifest's folder"},
		{"absolute", `{"schemas":[{"urn":"urn:babel:a:b","schema":"/etc/order.json"}]}`, "is not a path inside the manifest's folder"},
		{"missing file", `{"schemas":[{"urn":"urn:babel:a:b","schema":"schemas/nope.json"}]}`, "entry 1 (urn:babel:a:b): open schemas/nope.json"},
		{"schema not JSON", `{"schemas":[{"urn":"urn:babel:a:b","schema":"schemas/bad.json"}]}`, "urn:babel:a:b: schemas/bad.json: not JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := schemas()
			files["schemas/bad.json"] = `{"type":`
			_, err := New(RegistryFile(writeRegistry(t, tc.manifest, files)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if _, err := New(RegistryFile(filepath.Join(t.TempDir(), "registry.json"))); err == nil || !strings.Contains(err.Error(), "schema registry") {
		t.Errorf("a missing manifest: %v", err)
	}
}

// RegistryFS refuses a schema path that leaves the manifest's folder by
// "..", even to a file the fs.FS holds.
func TestRegistryFSRefusesAPathLeavingTheManifestsFolder(t *testing.T) {
	schema := &fstest.MapFile{Data: []byte(`{"type": "object"}`)}
	for _, p := range []string{"../outside.json", "../reg2/x.json", "a/../../outside.json"} {
		fsys := fstest.MapFS{
			"reg/registry.json": {Data: []byte(`{"schemas": [{"urn": "urn:babel:orders:created", "schema": "` + p + `"}]}`)},
			"outside.json":      schema,
			"reg2/x.json":       schema,
		}
		_, err := New(RegistryFS(fsys, "reg/registry.json"))
		if err == nil || !strings.Contains(err.Error(), "not a path inside the manifest's folder") {
			t.Errorf("%s: New = %v, want the path refused", p, err)
		}
	}
	fsys := fstest.MapFS{
		"reg/registry.json": {Data: []byte(`{"schemas": [{"urn": "urn:babel:orders:created", "schema": "a/../s.json"}]}`)},
		"reg/s.json":        schema,
	}
	if _, err := New(RegistryFS(fsys, "reg/registry.json")); err != nil {
		t.Errorf("a path inside the folder: %v", err)
	}
}
