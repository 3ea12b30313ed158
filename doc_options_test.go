package artemis

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOptionsStateTheirDefaultInOneForm: every field of the
// configuration structs ends its doc comment with its default, in one form:
// "Default: ...".
func TestOptionsStateTheirDefaultInOneForm(t *testing.T) {
	want := map[string]bool{"ClientOptions": true, "ConsumeOptions": true, "Backoff": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	marker := regexp.MustCompile(`Default( \([A-Za-z]+\))?: `)
	nextSentence := regexp.MustCompile(`\.\s+[A-Z]`)
	fset := token.NewFileSet()
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !want[ts.Name.Name] {
				return true
			}
			found++
			st := ts.Type.(*ast.StructType)
			for _, field := range st.Fields.List {
				for _, name := range field.Names {
					doc := strings.TrimSpace(field.Doc.Text())
					at := marker.FindAllStringIndex(doc, -1)
					if len(at) == 0 || nextSentence.MatchString(doc[at[len(at)-1][0]:]) || !strings.HasSuffix(doc, ".") {
						t.Errorf("%s.%s: its doc comment does not end with \"Default: ...\": %q", ts.Name.Name, name.Name, doc)
					}
				}
			}
			return false
		})
	}
	if found != len(want) {
		t.Errorf("found %d of the %d configuration structs", found, len(want))
	}
}
