package artemis

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// maxLibraryFileLines is the layout's limit on a library source file (README
// "Layout"): past it, a file holds more than one concept.
const maxLibraryFileLines = 450

// TestLayout keeps the layout's two rules: no library file over the limit,
// and a test file beside each source file (X_test.go for X.go).
func TestLayout(t *testing.T) {
	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range sources {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		checked++
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\n")); n > maxLibraryFileLines {
			t.Errorf("%s has %d lines, over the layout's %d: split it by concept", f, n, maxLibraryFileLines)
		}
		if _, err := os.Stat(strings.TrimSuffix(f, ".go") + "_test.go"); err != nil {
			t.Errorf("%s has no %s beside it", f, strings.TrimSuffix(f, ".go")+"_test.go")
		}
	}
	if checked < 20 {
		t.Fatalf("only %d library files found: the test runs outside the package folder?", checked)
	}
}

// TestLayoutTiers keeps the test tiers apart: the root holds the unit tests
// (and the godoc examples) only. A test that needs a broker belongs in
// integration/ (the fault tests, which kill theirs, in faults/), so no test
// file here is named integration_* or fault_*, or imports the broker
// harness or the broker tiers' helpers.
func TestLayoutTiers(t *testing.T) {
	tests, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) < 20 {
		t.Fatalf("only %d test files found: the test runs outside the package folder?", len(tests))
	}
	brokerOnly := []string{
		"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest",
		"github.com/babelqueue/babelqueue-go-artemis/internal/testkit",
	}
	fset := token.NewFileSet()
	for _, f := range tests {
		if strings.HasPrefix(f, "integration_") || strings.HasPrefix(f, "fault_") {
			t.Errorf("%s: the integration tests live in integration/, the fault tests in faults/", f)
		}
		file, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); slices.Contains(brokerOnly, p) {
				t.Errorf("%s imports %s: a test that needs a broker belongs in integration/ or faults/", f, p)
			}
		}
	}
}
