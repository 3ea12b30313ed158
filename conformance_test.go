package artemis

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The cross-SDK conformance suite (BabelQueue/conformance) is vendored byte
// for byte under testdata/conformance, at the version its VERSION file
// names: the version line, then the sha256 of every vendored file in
// sha256sum's format. Every case a test runs is read from manifest.json.
var conformanceDir = filepath.Join("testdata", "conformance")

// conformanceManifest is the part of the suite's manifest.json the root
// package's tests read (the idempotency block has its own reader in
// idempotency_test.go, the payload_schema block is the schema module's).
type conformanceManifest struct {
	SchemaVersion int               `json:"schema_version"`
	Cases         []conformanceCase `json:"cases"`
	Artemis       struct {
		PropertyProjection struct {
			EnvelopeFile      string            `json:"envelope_file"`
			JMSTypeAnnotation string            `json:"jms_type_annotation"`
			JMSType           string            `json:"jms_type"`
			CorrelationID     string            `json:"correlation_id"`
			Properties        map[string]string `json:"properties"`
		} `json:"property_projection"`
		AttemptsReconciliation struct {
			Cases []struct {
				Name             string `json:"name"`
				BodyAttempts     int    `json:"body_attempts"`
				DeliveryCount    uint32 `json:"delivery_count"`
				ExpectedAttempts int    `json:"expected_attempts"`
			} `json:"cases"`
		} `json:"attempts_reconciliation"`
	} `json:"artemis"`
}

// conformanceCase is one envelope case of the manifest.
type conformanceCase struct {
	Name   string `json:"name"`
	File   string `json:"file"`
	Valid  bool   `json:"valid"`
	Reason string `json:"reason"`
	Expect struct {
		URN           string          `json:"urn"`
		Data          json.RawMessage `json:"data"`
		Attempts      int             `json:"attempts"`
		Lang          string          `json:"lang"`
		SchemaVersion int             `json:"schema_version"`
		DeadLetter    *struct {
			Reason        string `json:"reason"`
			OriginalQueue string `json:"original_queue"`
		} `json:"dead_letter"`
	} `json:"expect"`
}

func loadConformance(t testing.TB) conformanceManifest {
	t.Helper()
	var m conformanceManifest
	if err := json.Unmarshal(readConformanceFile(t, "manifest.json"), &m); err != nil {
		t.Fatalf("the vendored manifest: %v", err)
	}
	if m.SchemaVersion != 1 || len(m.Cases) == 0 || len(m.Artemis.AttemptsReconciliation.Cases) == 0 {
		t.Fatalf("the vendored manifest has schema_version %d, %d envelope cases, %d attempts cases: not the suite this package reads",
			m.SchemaVersion, len(m.Cases), len(m.Artemis.AttemptsReconciliation.Cases))
	}
	return m
}

// readConformanceFile reads a file of the vendored suite by the path the
// manifest gives it (fixtures/x.json).
func readConformanceFile(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(conformanceDir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatalf("the vendored suite: %v", err)
	}
	return b
}

// conformanceProblems is what Validate says of each invalid case: the
// manifest gives its reason in prose, this package's words are ours. A
// new invalid case in the suite fails until it is written here.
var conformanceProblems = map[string]string{
	"invalid-unknown-schema-version": "meta.schema_version is 2, want 1",
	"invalid-missing-urn":            "the URN (job, else urn) is missing or blank",
}

// TestConformanceEnvelopeCases runs every envelope case of the manifest:
// a valid fixture decodes to the case's expectations and re-encodes
// canonically (pinned under testdata/encode/conformance), its DLQ copy
// carries the same envelope; an invalid one is refused.
func TestConformanceEnvelopeCases(t *testing.T) {
	for _, tc := range loadConformance(t).Cases {
		t.Run(tc.Name, func(t *testing.T) {
			in := readConformanceFile(t, tc.File)
			env := mustDecode(t, string(in))
			err := env.Validate()
			if !tc.Valid {
				problem, ok := conformanceProblems[tc.Name]
				if !ok {
					t.Fatalf("no expected error written for the invalid case %q (%s): a new case in the suite?", tc.Name, tc.Reason)
				}
				if err == nil || !errors.Is(err, ErrInvalidEnvelope) || !strings.Contains(err.Error(), problem) {
					t.Fatalf("Validate: %v, want an ErrInvalidEnvelope saying %q (the suite: %s)", err, problem, tc.Reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			x := tc.Expect
			if env.URN != x.URN || env.Attempts != x.Attempts || env.Meta.Lang != x.Lang || env.Meta.SchemaVersion != x.SchemaVersion {
				t.Errorf("decoded urn %q attempts %d lang %q schema_version %d, the suite expects %q %d %q %d",
					env.URN, env.Attempts, env.Meta.Lang, env.Meta.SchemaVersion, x.URN, x.Attempts, x.Lang, x.SchemaVersion)
			}
			if !sameJSON(t, env.Data, x.Data) {
				t.Errorf("decoded data %s, the suite expects %s", env.Data, x.Data)
			}
			switch {
			case x.DeadLetter == nil && env.DeadLetter != nil:
				t.Errorf("decoded a dead_letter block %+v the suite does not expect", env.DeadLetter)
			case x.DeadLetter != nil && (env.DeadLetter == nil || env.DeadLetter.Reason != x.DeadLetter.Reason ||
				env.DeadLetter.OriginalQueue != x.DeadLetter.OriginalQueue):
				t.Errorf("decoded dead_letter %+v, the suite expects %+v", env.DeadLetter, *x.DeadLetter)
			}

			out := mustEncode(t, env)
			assertGolden(t, filepath.Join("testdata", "encode", "conformance", tc.Name+".canonical"), out)
			checkCanonicalReencode(t, in, out)
			// A fixture that names the URN by the inbound alias comes out
			// under "job"; otherwise the fixture is in contract key order
			// and the canonical bytes are it without its whitespace.
			ref := in
			if !bytes.Contains(in, []byte(`"job"`)) {
				ref = bytes.Replace(in, []byte(`"urn"`), []byte(`"job"`), 1)
			}
			if want := refCanonical(t, ref); !bytes.Equal(want, out) {
				t.Errorf("re-encode\n got: %s\nwant: %s", out, want)
			}
			// The DLQ copy of the fixture carries the same canonical envelope.
			dl := &DeadLetter{Reason: ReasonFailed, FailedAt: 1, OriginalQueue: "orders", Attempts: env.Attempts, Lang: Lang}
			msg := deadLetterEnvelope(env, dl, mustMessage(t, env), "orders")
			body, _ := msg.Value.(string)
			prefix := out[:len(out)-1]
			if i := bytes.LastIndex(out, []byte(`,"dead_letter"`)); i >= 0 {
				prefix = out[:i]
			}
			if !strings.HasPrefix(body, string(prefix)) {
				t.Errorf("DLQ copy body %s does not carry the canonical envelope %s", body, out)
			}
			checkCanonicalReencode(t, in, []byte(body))
		})
	}
}

// sameJSON reports whether two JSON texts hold the same values, number
// literals compared as written.
func sameJSON(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	for _, p := range []struct {
		raw []byte
		v   *any
	}{{a, &va}, {b, &vb}} {
		dec := json.NewDecoder(bytes.NewReader(p.raw))
		dec.UseNumber()
		if err := dec.Decode(p.v); err != nil {
			t.Fatalf("sameJSON(%s): %v", p.raw, err)
		}
	}
	return reflect.DeepEqual(va, vb)
}

// TestConformanceArtemisProjection checks the manifest's artemis
// projection on its envelope: the JMS type annotation, the correlation id
// and exactly the bq_ properties it lists, as strings.
func TestConformanceArtemisProjection(t *testing.T) {
	p := loadConformance(t).Artemis.PropertyProjection
	env := mustDecode(t, string(readConformanceFile(t, p.EnvelopeFile)))
	msg := mustMessage(t, env)
	if p.JMSTypeAnnotation != AnnotationJMSType {
		t.Errorf("the suite's JMS type annotation is %q, the library writes %q", p.JMSTypeAnnotation, AnnotationJMSType)
	}
	if got, ok := msg.Annotations[p.JMSTypeAnnotation].(string); !ok || got != p.JMSType {
		t.Errorf("annotation %s = %#v, the suite expects the string %q", p.JMSTypeAnnotation, msg.Annotations[p.JMSTypeAnnotation], p.JMSType)
	}
	if msg.Properties == nil || msg.Properties.CorrelationID != p.CorrelationID {
		t.Errorf("correlation-id %#v, the suite expects %q", msg.Properties, p.CorrelationID)
	}
	want := map[string]any{}
	for k, v := range p.Properties {
		want[k] = v
	}
	if !reflect.DeepEqual(msg.ApplicationProperties, want) {
		t.Errorf("application properties %#v, the suite expects exactly %#v", msg.ApplicationProperties, want)
	}
}

// TestConformanceAttemptsReconciliation runs the manifest's
// max(body, delivery-count) cases.
func TestConformanceAttemptsReconciliation(t *testing.T) {
	for _, tc := range loadConformance(t).Artemis.AttemptsReconciliation.Cases {
		if got := reconcileAttempts(tc.BodyAttempts, tc.DeliveryCount); got != tc.ExpectedAttempts {
			t.Errorf("%s: reconcileAttempts(%d, %d) = %d, the suite expects %d",
				tc.Name, tc.BodyAttempts, tc.DeliveryCount, got, tc.ExpectedAttempts)
		}
	}
}

// conformanceVersion is testdata/conformance/VERSION: the suite's version
// line (its commit first) and the sha256 of each vendored file by path.
type conformanceVersion struct {
	line, commit string
	sums         map[string]string
}

func readConformanceVersion(dir string) (conformanceVersion, error) {
	b, err := os.ReadFile(filepath.Join(dir, "VERSION"))
	if err != nil {
		return conformanceVersion{}, err
	}
	v := conformanceVersion{sums: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 {
			v.line = line
			v.commit, _, _ = strings.Cut(line, " ")
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != sha256.Size*2 || name == "" {
			return v, fmt.Errorf("VERSION line %d is not `<sha256>  <path>`: %q", n, line)
		}
		v.sums[name] = sum
	}
	if v.commit == "" || len(v.sums) == 0 {
		return v, errors.New("VERSION has no version line or no checksums")
	}
	return v, sc.Err()
}

// vendoredFiles hashes every file under dir but VERSION, by slash path.
func vendoredFiles(dir string) (map[string]string, error) {
	sums := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "VERSION" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		s := sha256.Sum256(b)
		sums[filepath.ToSlash(rel)] = hex.EncodeToString(s[:])
		return nil
	})
	return sums, err
}

// conformanceDrift lists how the vendored copy in dir and its VERSION
// disagree: a file changed, missing or not listed, and a SOURCE.md that
// names another commit.
func conformanceDrift(dir string) ([]string, conformanceVersion, error) {
	v, err := readConformanceVersion(dir)
	if err != nil {
		return nil, v, err
	}
	got, err := vendoredFiles(dir)
	if err != nil {
		return nil, v, err
	}
	var problems []string
	for name, want := range v.sums {
		switch sum, ok := got[name]; {
		case !ok:
			problems = append(problems, name+": listed in VERSION, not vendored")
		case sum != want:
			problems = append(problems, fmt.Sprintf("%s: sha256 %s, VERSION records %s", name, sum[:12], want[:12]))
		}
	}
	for name := range got {
		if _, ok := v.sums[name]; !ok {
			problems = append(problems, name+": vendored, not listed in VERSION")
		}
	}
	if src, err := os.ReadFile(filepath.Join(dir, "SOURCE.md")); err == nil && !bytes.Contains(src, []byte("commit "+v.commit)) {
		problems = append(problems, "SOURCE.md does not name commit "+v.commit)
	}
	slices.Sort(problems)
	return problems, v, nil
}

// TestConformanceVendoredAtItsVersion fails when a vendored file is not
// the one VERSION records.
func TestConformanceVendoredAtItsVersion(t *testing.T) {
	problems, v, err := conformanceDrift(conformanceDir)
	if err != nil {
		t.Fatalf("testdata/conformance/VERSION: %v", err)
	}
	if len(problems) > 0 {
		t.Fatalf("testdata/conformance does not match its VERSION (%s):\n  %s\n"+
			"Vendor that version of the suite byte for byte, or, moving to a new version, copy the suite whole and "+
			"write VERSION anew (CONTRIBUTING.md, \"The conformance suite\")", v.line, strings.Join(problems, "\n  "))
	}
}

// TestConformanceDriftIsNamed proves the check above can fail: a copy of
// the suite with one file changed, one removed and one added is told file
// by file.
func TestConformanceDriftIsNamed(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(conformanceDir)); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "fixtures", "order-created.json"), []byte("{}"), 0o600))
	must(os.Remove(filepath.Join(dir, "fixtures", "urn-alias.json")))
	must(os.WriteFile(filepath.Join(dir, "fixtures", "extra.json"), []byte("{}"), 0o600))
	problems, _, err := conformanceDrift(dir)
	must(err)
	want := []string{
		"fixtures/extra.json: vendored, not listed in VERSION",
		"fixtures/order-created.json: sha256 44136fa355b3, VERSION records c9e5fd1ae59a",
		"fixtures/urn-alias.json: listed in VERSION, not vendored",
	}
	if !slices.Equal(problems, want) {
		t.Fatalf("drift told as\n  %s\nwant\n  %s", strings.Join(problems, "\n  "), strings.Join(want, "\n  "))
	}
}

// sharedConformanceDir is the suite's own copy when it sits beside the
// repository (as in CI), or BQ_CONFORMANCE_DIR.
func sharedConformanceDir() string {
	if d := os.Getenv("BQ_CONFORMANCE_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "shared", "conformance")
}

// TestConformanceMatchesTheSuite compares the vendored copy byte for byte
// with the suite's own copy, when there is one, and names each file that
// differs or is on one side only.
func TestConformanceMatchesTheSuite(t *testing.T) {
	suite := sharedConformanceDir()
	if _, err := os.Stat(filepath.Join(suite, "manifest.json")); err != nil {
		t.Skipf("no conformance suite at %s (set BQ_CONFORMANCE_DIR): the vendored copy is checked against VERSION only", suite)
	}
	theirs, err := vendoredFiles(suite)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := vendoredFiles(conformanceDir)
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	for name, sum := range theirs {
		switch mine, ok := ours[name]; {
		case !ok:
			problems = append(problems, name+": in the suite, not vendored")
		case mine != sum:
			problems = append(problems, name+": differs")
		}
	}
	for name := range ours {
		if _, ok := theirs[name]; !ok {
			problems = append(problems, name+": vendored, not in the suite")
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		v, _ := readConformanceVersion(conformanceDir)
		t.Fatalf("testdata/conformance (VERSION %s) differs from the suite at %s:\n  %s\n"+
			"Vendor the suite again byte for byte and write VERSION for its version (CONTRIBUTING.md, \"The conformance suite\")",
			v.line, suite, strings.Join(problems, "\n  "))
	}
}
