package artemis

import (
	"bytes"
	"os"
	"path/filepath"
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
