package artemis

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
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

// flowPicture is the package's map (CONTRIBUTING.md, "Layout"), read from
// the top, where a user's call enters, down to the ground: each row names
// its files in the same order. A file may name only the files after it; so
// a reader following a publish or a delivery goes down and never back up.
var flowPicture = [][]string{
	{"client_topic.go"},
	{"client.go"},
	{"client_cluster.go"},
	{"client_single.go"},
	{"client_consume.go"},
	{"consume_options.go", "credit_window.go"},
	{"selector.go"},
	{"client_receipt.go", "client_transfer.go", "client_sender.go"},
	{"client_dial.go"},
	{"client_loss.go"},
	{"client_report.go", "client_status.go"},
	{"client_options.go"},
	{"client_conn.go", "client_broker.go", "client_events.go"},
	{"listen.go"},
	{"listen_group.go"},
	{"handle.go"},
	{"gate.go", "routing.go", "poison.go", "decode.go", "reconcile.go", "payload_check.go", "handler.go"},
	{"idempotency.go", "idempotency_memory.go", "idempotency_store.go"},
	{"retry.go"},
	{"deadletter.go"},
	{"settle.go"},
	{"consumer.go", "cluster_attempts.go", "retry_schedule.go"},
	{"consume_limit.go"},
	{"outgoing.go", "raw.go", "publisher.go", "receipt.go"},
	{"message_pool.go"},
	{"mapping.go"},
	{"publish_options.go", "observe.go", "payload.go"},
	{"envelope_decode.go", "envelope_encode.go", "envelope.go"},
	{"struct_marshal.go", "bind.go"},
	{"struct_plan.go"},
	{"outcome.go", "replay.go", "headers.go", "backoff.go", "redact.go"},
	{"link.go", "errors.go", "doc.go", "string_view.go"},
}

// TestFlowGoesDown keeps the code true to flowPicture: every library file is
// in the picture, and no declaration names one declared in a file before
// its own (above it).
func TestFlowGoesDown(t *testing.T) {
	pos := map[string]int{}
	for _, files := range flowPicture {
		for _, f := range files {
			if _, dup := pos[f]; dup {
				t.Fatalf("%s is twice in flowPicture", f)
			}
			pos[f] = len(pos)
		}
	}
	refs := fileReferences(t)
	for f := range refs.files {
		if _, ok := pos[f]; !ok {
			t.Errorf("%s is not in flowPicture: place it by what it names and what names it", f)
		}
	}
	for f := range pos {
		if !refs.files[f] {
			t.Errorf("flowPicture names %s, which is not a library file", f)
		}
	}
	up, throughSeams := 0, 0
	for _, r := range refs.list {
		if pos[r.to] > pos[r.from] {
			continue
		}
		if r.via != "" && seams[r.via] != "" {
			throughSeams++ // handed down from above through a seam
			continue
		}
		up++
		t.Errorf("%s (%s) names %s of %s, a file above it in flowPicture", r.from, r.decl, r.name, r.to)
	}
	if len(refs.list) < 500 {
		t.Fatalf("only %d references between files found: the type check lost them?", len(refs.list))
	}
	if throughSeams == 0 {
		t.Fatal("no call through a seam to an implementation above found: the interface check lost them?")
	}
	t.Logf("%d library files, %d references between files, %d going up, %d calls through a seam to an implementation above",
		len(refs.files), len(refs.list), up, throughSeams)
}

// seams are the interfaces through which a call may reach an
// implementation in a file above the caller's: a caller above hands its
// implementation down through one. Any other call through an interface
// implemented above is a climb, as a named reference up is.
var seams = map[string]string{
	"sendPath":                    "the one seam between a Publisher and what it sends through: a bare link, or a Client's sender (receipt.go)",
	"Sender":                      "the link interfaces (link.go): go-amqp's links, and the Client's reconnecting sender and counting receiver, implement them",
	"outcomeSender":               "the link interfaces (link.go), as Sender",
	"PublishOption":               "the options a Publisher is given: the two that serve a Consumer too (WithObserver, WithPayloadValidator) are declared with the Consumer's, and only write the publisher's configuration",
	"Receiver":                    "the link interfaces (link.go), as Sender",
	"interface{Address() string}": "a link's address, read from go-amqp's links and the Client's alike",
	"interface{Unwrap() error}":   "the errors package's chain, walked through any error",
}

// fileRef is a declaration in one file naming a declaration (or a field
// or method) of another file; via is the interface when the name is a
// method a call through that interface may run.
type fileRef struct{ from, decl, to, name, via string }

type fileRefs struct {
	files map[string]bool
	list  []fileRef
}

// fileReferences type-checks the library's files (not the tests) and lists
// each distinct reference from a top-level declaration of one file to a
// package-level name, field or method declared in another file.
func fileReferences(t *testing.T) fileRefs {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	refs := fileRefs{files: map[string]bool{}}
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		refs.files[n] = true
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: exportDataImporter(t, fset)}
	pkg, err := conf.Check("artemis", fset, files, info)
	if err != nil {
		t.Fatalf("type-checking the library: %v", err)
	}
	fileOf := func(p token.Pos) string { return filepath.Base(fset.Position(p).Filename) }
	seen := map[fileRef]bool{}
	for _, f := range files {
		from := fileOf(f.Pos())
		for _, d := range f.Decls {
			decl := declName(d)
			ast.Inspect(d, func(n ast.Node) bool {
				id, ok := n.(*ast.Ident)
				if !ok {
					return true
				}
				obj := info.Uses[id]
				if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() || !packageLevel(obj, pkg) {
					return true
				}
				to := fileOf(obj.Pos())
				r := fileRef{from, decl, to, obj.Name(), ""}
				if to != from && !seen[r] {
					seen[r] = true
					refs.list = append(refs.list, r)
				}
				// A call through an interface reaches every implementation
				// of the method: each is a reference to the file that
				// declares it.
				for _, impl := range implementations(pkg, obj) {
					r := fileRef{from, decl, fileOf(impl.Pos()), impl.name, impl.iface}
					if r.to != from && !seen[r] {
						seen[r] = true
						refs.list = append(refs.list, r)
					}
				}
				return true
			})
		}
	}
	return refs
}

// implementation is a concrete method that a call through an interface
// method may run.
type implementation struct {
	types.Object
	name  string // Interface.Method by Type
	iface string // Interface
}

// implementations lists, for obj a method of an interface declared in pkg,
// the methods of pkg's concrete types implementing that interface (by value
// or by pointer) that a call of obj runs; nil for anything else.
func implementations(pkg *types.Package, obj types.Object) []implementation {
	fn, ok := obj.(*types.Func)
	if !ok {
		return nil
	}
	recv := fn.Type().(*types.Signature).Recv()
	if recv == nil {
		return nil
	}
	iface, ok := recv.Type().Underlying().(*types.Interface)
	if !ok {
		return nil
	}
	ifaceName := recv.Type().String()
	if n, ok := recv.Type().(*types.Named); ok {
		ifaceName = n.Obj().Name()
	}
	var out []implementation
	for _, name := range pkg.Scope().Names() {
		tn, ok := pkg.Scope().Lookup(name).(*types.TypeName)
		if !ok || tn.IsAlias() {
			continue
		}
		if _, isIface := tn.Type().Underlying().(*types.Interface); isIface {
			continue
		}
		ptr := types.NewPointer(tn.Type())
		if !types.Implements(tn.Type(), iface) && !types.Implements(ptr, iface) {
			continue
		}
		m, _, _ := types.LookupFieldOrMethod(ptr, true, pkg, fn.Name())
		mf, ok := m.(*types.Func)
		if !ok || mf.Pkg() != pkg || !mf.Pos().IsValid() {
			continue
		}
		if _, viaIface := mf.Type().(*types.Signature).Recv().Type().Underlying().(*types.Interface); viaIface {
			continue // promoted from an embedded interface: its own implementations count
		}
		out = append(out, implementation{mf, ifaceName + "." + fn.Name() + " by " + tn.Name(), ifaceName})
	}
	return out
}

// packageLevel reports whether obj is declared at the package level, or is
// a field or method (which belong to their type's declaration), rather than
// a local name.
func packageLevel(obj types.Object, pkg *types.Package) bool {
	switch o := obj.(type) {
	case *types.Var:
		return o.IsField() || o.Parent() == pkg.Scope()
	case *types.Func:
		return true
	case *types.Label, *types.PkgName:
		return false
	}
	return obj.Parent() == pkg.Scope()
}

// declName names a top-level declaration for a failure message: Func,
// Type.Method, or a type's or value's first name.
func declName(d ast.Decl) string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv != nil && len(d.Recv.List) == 1 {
			typ := d.Recv.List[0].Type
			if s, ok := typ.(*ast.StarExpr); ok {
				typ = s.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				return id.Name + "." + d.Name.Name
			}
		}
		return d.Name.Name
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				return s.Name.Name
			case *ast.ValueSpec:
				return s.Names[0].Name
			}
		}
	}
	return "?"
}

// exportDataImporter loads the library's imports from the export data the
// go command built for them (go list -export), so the check is the
// compiler's: every name, field and method resolves.
func exportDataImporter(t *testing.T, fset *token.FileSet) types.Importer {
	t.Helper()
	// go test puts its own go command first on the test's PATH.
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, "=")
		exports[path] = file
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
}
