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
// configuration structs, and every option function (With...: consumer,
// publish, idempotency and store options), ends its doc comment with its
// default, in one form: "Default: ...".
func TestOptionsStateTheirDefaultInOneForm(t *testing.T) {
	want := map[string]bool{"ClientOptions": true, "Backoff": true}
	wantFuncs := map[string]bool{"WithCredit": true, "WithSelector": true, "WithOnlyHandledURNs": true,
		"WithoutDeadLetter": true, "WithMaxMessages": true, "WithStopWhenIdle": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	marker := regexp.MustCompile(`Default( \([A-Za-z]+\))?: `)
	nextSentence := regexp.MustCompile(`\.\s+[A-Z]`)
	fset := token.NewFileSet()
	found, foundFuncs := 0, 0
	endsWithDefault := func(doc string) bool {
		doc = strings.TrimSpace(doc)
		at := marker.FindAllStringIndex(doc, -1)
		return len(at) > 0 && !nextSentence.MatchString(doc[at[len(at)-1][0]:]) && strings.HasSuffix(doc, ".")
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			// Every option function (With...), the consume options among them.
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "With") {
				if wantFuncs[fd.Name.Name] {
					foundFuncs++
				}
				if !endsWithDefault(fd.Doc.Text()) {
					t.Errorf("%s: its doc comment does not end with \"Default: ...\": %q", fd.Name.Name, fd.Doc.Text())
				}
			}
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
					if !endsWithDefault(doc) {
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
	if foundFuncs != len(wantFuncs) {
		t.Errorf("found %d of the %d consume options", foundFuncs, len(wantFuncs))
	}
}
