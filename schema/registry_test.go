package schema

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

//go:embed testdata/schemas
var testSchemas embed.FS

// conformance is the payload_schema block of the conformance suite's
// manifest, vendored byte for byte under the library's testdata/conformance.
type conformance struct {
	Schema json.RawMessage `json:"schema"`
	Cases  []struct {
		Name  string          `json:"name"`
		Valid bool            `json:"valid"`
		Data  json.RawMessage `json:"data"`
	} `json:"cases"`
}

func loadConformance(t testing.TB) conformance {
	t.Helper()
	b := readSuiteFile(t, "manifest.json")
	var m struct {
		PayloadSchema conformance `json:"payload_schema"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.PayloadSchema.Cases) == 0 || len(m.PayloadSchema.Schema) == 0 {
		t.Fatal("the manifest has no payload_schema cases")
	}
	return m.PayloadSchema
}

const conformanceURN = "urn:babel:orders:created"

// wantViolations is what each invalid conformance case must be told.
var wantViolations = map[string][]string{
	"invalid-missing-required":    {"/order_id: is required"},
	"invalid-wrong-type":          {"/order_id: must be integer, not string"},
	"invalid-additional-property": {"/extra: is not allowed"},
	"invalid-enum":                {`/currency: must be one of "USD", "EUR", "TRY"`},
	"invalid-below-minimum":       {"/order_id: must be >= 1"},
}

func violationTexts(err error) []string {
	var pe *artemis.PayloadError
	if !errors.As(err, &pe) {
		return nil
	}
	out := make([]string, len(pe.Violations))
	for i, v := range pe.Violations {
		out[i] = v.String()
	}
	return out
}

func TestConformancePayloadSchema(t *testing.T) {
	c := loadConformance(t)
	reg, err := New(Bytes(conformanceURN, c.Schema))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, tc := range c.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			err := reg.ValidatePayload(context.Background(), conformanceURN, tc.Data)
			if tc.Valid {
				if err != nil {
					t.Fatalf("valid data refused: %v", err)
				}
				return
			}
			if !errors.Is(err, artemis.ErrInvalidPayload) {
				t.Fatalf("invalid data %s: got %v, want an error matching ErrInvalidPayload", tc.Data, err)
			}
			want, ok := wantViolations[tc.Name]
			if !ok {
				t.Fatalf("no expected violations written for the case %q (a new case in the manifest?)", tc.Name)
			}
			seen++
			if got := violationTexts(err); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("violations\n got: %q\nwant: %q", got, want)
			}
		})
	}
	if seen != len(wantViolations) {
		t.Errorf("%d invalid cases checked, %d expected", seen, len(wantViolations))
	}
}

// TestConformanceThroughThePublisher runs the same cases through a
// Publisher with the registry: the invalid ones are refused and nothing is
// sent, the valid ones are.
func TestConformanceThroughThePublisher(t *testing.T) {
	c := loadConformance(t)
	reg, err := New(Bytes(conformanceURN, c.Schema))
	if err != nil {
		t.Fatal(err)
	}
	s := &countingSender{}
	pub := artemis.NewPublisher(s, "orders", reg.PublishOption())
	valid := 0
	for _, tc := range c.Cases {
		_, err := pub.Publish(context.Background(), artemis.Job(conformanceURN, tc.Data))
		if tc.Valid {
			valid++
			if err != nil {
				t.Errorf("%s: %v", tc.Name, err)
			}
			continue
		}
		if !errors.Is(err, artemis.ErrInvalidPayload) {
			t.Errorf("%s: got %v, want ErrInvalidPayload", tc.Name, err)
		}
	}
	if s.n != valid {
		t.Errorf("%d messages sent, want %d (the valid cases only)", s.n, valid)
	}
}

// countingSender accepts every transfer and counts them.
type countingSender struct {
	mu sync.Mutex
	n  int
}

func (s *countingSender) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return nil
}

func TestDirAndFSLoadTheSameRegistry(t *testing.T) {
	fromDir, err := New(Dir(filepath.Join("testdata", "schemas")))
	if err != nil {
		t.Fatal(err)
	}
	fromFS, err := New(FS(testSchemas, "testdata/schemas"))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := New(FS(os.DirFS("testdata"), "schemas"))
	if err != nil {
		t.Fatal(err)
	}
	want := "urn:babel:orders:created urn:babel:payments:captured urn:babel:shared:money"
	for name, r := range map[string]*Registry{"Dir": fromDir, "FS": fromFS, "DirFS": sub} {
		if got := strings.Join(r.URNs(), " "); got != want {
			t.Errorf("%s: URNs %q, want %q", name, got, want)
		}
		if !r.Has("urn:babel:orders:created") || r.Has("urn:babel:orders:cancelled") {
			t.Errorf("%s: Has is wrong", name)
		}
		// The $ref to ../shared/money.json resolved among the loaded files.
		err := r.ValidatePayload(context.Background(), "urn:babel:orders:created", json.RawMessage(`{"order_id":1,"amount":-5}`))
		if got := violationTexts(err); len(got) != 1 || got[0] != "/amount: must be >= 0" {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestDraft2020Keywords(t *testing.T) {
	reg, err := New(FS(testSchemas, "testdata/schemas"))
	if err != nil {
		t.Fatal(err)
	}
	const urn = "urn:babel:payments:captured"
	for _, tc := range []struct {
		data string
		want []string
	}{
		{`{"payment_id":"p1","lines":["a",1]}`, nil},
		{`{"payment_id":"p1","lines":["a","b"]}`, []string{"/lines/1: must be integer, not string"}},
		{`{"payment_id":"p1","lines":["a",1,2]}`, []string{"/lines/2: is not allowed"}},
		{`{"payment_id":"","lines":[],"refund_of":"p0"}`, []string{"/payment_id: must be at least 1 characters long", "/reason: is required when \"refund_of\" is present"}},
		{`{"payment_id":"p1","lines":[],"note":"x"}`, []string{"/note: is not allowed"}},
	} {
		err := reg.ValidatePayload(context.Background(), urn, json.RawMessage(tc.data))
		got := violationTexts(err)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.data, err)
			}
			continue
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%s\n got: %q\nwant: %q", tc.data, got, tc.want)
		}
	}
}

func TestURNWithoutSchemaIsNotChecked(t *testing.T) {
	reg, err := New(Bytes("urn:babel:a:b", []byte(`{"type":"object","required":["x"]}`)))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.ValidatePayload(context.Background(), "urn:babel:other:one", json.RawMessage(`not even json`)); err != nil {
		t.Errorf("a URN without a schema was checked: %v", err)
	}
	var zero Registry
	if err := zero.ValidatePayload(context.Background(), "urn:babel:a:b", json.RawMessage(`{}`)); err != nil {
		t.Errorf("the zero Registry checked: %v", err)
	}
	// A schema without $schema is 2020-12.
	if err := reg.ValidatePayload(context.Background(), "urn:babel:a:b", json.RawMessage(`{}`)); !errors.Is(err, artemis.ErrInvalidPayload) {
		t.Errorf("got %v", err)
	}
	err = reg.ValidatePayload(context.Background(), "urn:babel:a:b", json.RawMessage(`{"x":`))
	if got := violationTexts(err); len(got) != 1 || !strings.HasPrefix(got[0], "(root): not JSON") {
		t.Errorf("truncated data: %v", err)
	}
}

func TestViolationsQuoteNoValue(t *testing.T) {
	reg, err := New(Bytes("urn:babel:a:b", []byte(`{
		"type":"object",
		"properties":{
			"card":{"type":"string","pattern":"^[0-9]{4}$","maxLength":4},
			"pin":{"const":"ok"},
			"a/b~c":{"type":"integer"},
			"when":{"format":"date-time"},
			"n":{"exclusiveMaximum":2.5,"multipleOf":2}
		}
	}`)))
	if err != nil {
		t.Fatal(err)
	}
	const secret = "SECRET-4111111111111111"
	err = reg.ValidatePayload(context.Background(), "urn:babel:a:b", json.RawMessage(`{"card":"`+secret+`","pin":"`+secret+`","a/b~c":"`+secret+`","n":3}`))
	if err == nil {
		t.Fatal("invalid data passed")
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("the error quotes the data: %v", err)
	}
	want := []string{
		`/card: must match the pattern "^[0-9]{4}$"`,
		`/card: must be at most 4 characters long`,
		`/pin: must be "ok"`,
		`/a~1b~0c: must be integer, not string`,
		`/n: must be < 2.5`,
		`/n: must be a multiple of 2`,
	}
	got := violationTexts(err)
	if strings.Join(sortedCopy(got), "|") != strings.Join(sortedCopy(want), "|") {
		t.Errorf("violations\n got: %q\nwant: %q", got, want)
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestNewRefusesBadSchemas(t *testing.T) {
	for name, tc := range map[string]struct {
		sources []Source
		want    string
	}{
		"duplicate URN": {[]Source{Bytes("urn:babel:a:b", []byte(`{}`)), Bytes("urn:babel:a:b", []byte(`{}`))}, "two schemas for one URN"},
		"not JSON":      {[]Source{Bytes("urn:babel:a:b", []byte(`{"type":`))}, "not JSON"},
		"bad schema":    {[]Source{Bytes("urn:babel:a:b", []byte(`{"type":5}`))}, "urn:babel:a:b"},
		"blank URN":     {[]Source{Bytes(" ", []byte(`{}`))}, "blank URN"},
		"missing $ref": {[]Source{Bytes("urn:babel:a:b", []byte(`{"$ref":"other.json"}`))},
			"is not one of the loaded schemas"},
		"network $ref": {[]Source{Bytes("urn:babel:a:b", []byte(`{"$ref":"https://example.com/s.json"}`))},
			"is not one of the loaded schemas"},
		"missing dir": {[]Source{Dir(filepath.Join("testdata", "nothing-here"))}, "schema directory"},
		"empty dir":   {[]Source{FS(fstest.MapFS{"s/README": {Data: []byte("x")}}, "s")}, "no *.json file"},
		"dir and bytes clash": {[]Source{FS(testSchemas, "testdata/schemas"), Bytes("urn:babel:orders:created", []byte(`{}`))},
			"two schemas for one URN"},
	} {
		t.Run(name, func(t *testing.T) {
			reg, err := New(tc.sources...)
			if err == nil || reg != nil {
				t.Fatalf("New: %v, %v; want an error", reg, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestRegistryIsSafeForConcurrentUse(t *testing.T) {
	c := loadConformance(t)
	reg, err := New(Bytes(conformanceURN, c.Schema))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				for _, tc := range c.Cases {
					if err := reg.ValidatePayload(context.Background(), conformanceURN, tc.Data); (err == nil) != tc.Valid {
						errs <- tc.Name
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for name := range errs {
		t.Errorf("%s: wrong answer under concurrency", name)
	}
}
