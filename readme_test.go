package artemis

import (
	"bufio"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlocks returns README.md's fenced code blocks of language lang.
func readmeBlocks(t *testing.T, lang string) []string {
	t.Helper()
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []string
	var cur *strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```"+lang:
			cur = &strings.Builder{}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

// TestReadmeGoSnippets parses every Go snippet of the README: a fragment as
// the body of a function or as declarations; a whole program (package
// main) is also built, in a module of its own that uses this copy of the
// library, so the first program a user copies compiles.
func TestReadmeGoSnippets(t *testing.T) {
	blocks := readmeBlocks(t, "go")
	if len(blocks) < 3 {
		t.Fatalf("only %d Go snippets in README.md", len(blocks))
	}
	programs := 0
	for i, b := range blocks {
		if strings.HasPrefix(strings.TrimSpace(b), "package ") {
			programs++
			buildProgram(t, i, b)
			continue
		}
		fset := token.NewFileSet()
		_, errBody := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+b+"\n}\n", 0)
		_, errDecl := parser.ParseFile(fset, "", "package p\n"+b, 0)
		if errBody != nil && errDecl != nil {
			t.Errorf("README Go snippet %d does not parse: %v\n%s", i+1, errBody, b)
		}
	}
	if programs == 0 {
		t.Error("README.md has no complete program")
	}
}

func buildProgram(t *testing.T, i int, src string) {
	t.Helper()
	if testing.Short() {
		t.Skip("building the README's program: not in -short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command: ", err)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mod := "module readmeprogram\n\ngo 1.25\n\nrequire github.com/babelqueue/babelqueue-go-artemis v0.0.0\n\nreplace github.com/babelqueue/babelqueue-go-artemis => " + root + "\n"
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(mod), "go.sum": sum, "main.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(gobin, "build", "-mod=mod", "-o", os.DevNull, ".")
	cmd.Dir = dir
	// Offline: the module cache has what the library needs.
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("README program (snippet %d) does not build: %v\n%s", i+1, err, out)
	}
}

// TestReadmeNamesWhatExists keeps the README's references true: every
// script it names exists and is executable, every scripts/artemis
// subcommand is one the tool has, every repository path and relative link
// exists, and every ARTEMIS_* or BQ_* variable it names is read somewhere.
func TestReadmeNamesWhatExists(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)

	for _, m := range regexp.MustCompile(`\bscripts/([a-z][a-z0-9_-]*)`).FindAllStringSubmatch(readme, -1) {
		fi, err := os.Stat(filepath.Join("scripts", m[1]))
		if err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("README names %s: not an executable script (%v)", m[0], err)
		}
	}

	cmds, err := os.ReadFile(filepath.Join("internal", "artemisctl", "commands.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`scripts/artemis ([a-z][a-z-]*)`).FindAllStringSubmatch(readme, -1) {
		if !strings.Contains(string(cmds), `"`+m[1]+`"`) {
			t.Errorf("README names `%s`: scripts/artemis has no command %q", m[0], m[1])
		}
	}

	for _, m := range regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`).FindAllStringSubmatch(readme, -1) {
		if _, err := os.Stat(m[1]); err != nil {
			t.Errorf("README links to %s, which does not exist", m[1])
		}
	}
	for _, m := range regexp.MustCompile("`((?:examples|cmd|docs|integration|faults|postgres|schema)/[A-Za-z0-9_./-]+)`").FindAllStringSubmatch(readme, -1) {
		if _, err := os.Stat(strings.TrimSuffix(m[1], "/")); err != nil {
			t.Errorf("README names %s, which does not exist", m[1])
		}
	}

	vars := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b(?:ARTEMIS|BQ)_[A-Z0-9_]+\b`).FindAllString(readme, -1) {
		vars[m] = true
	}
	if len(vars) == 0 {
		t.Fatal("no ARTEMIS_* variable found in README.md: the scan is wrong")
	}
	found := map[string]bool{}
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != "." && (strings.HasPrefix(n, ".") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") || strings.HasSuffix(path, "_test.go") && !strings.HasPrefix(path, "faults") {
			return nil // the documents themselves, and tests, do not make a variable real
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for v := range vars {
			if !found[v] && strings.Contains(string(data), v) {
				found[v] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for v := range vars {
		if !found[v] {
			t.Errorf("README names $%s, which no script or code reads", v)
		}
	}
	if strings.Contains(readme, "build tag") {
		t.Error("README speaks of a build tag: no test of this repository needs one (the fault tests are gated by BQ_FAULTS)")
	}
}
