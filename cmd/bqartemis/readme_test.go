package main

import (
	"bufio"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The documents that name bqartemis commands and flags: each named one
// must exist, so a renamed or removed flag cannot leave a stale line.
var commandDocs = []string{"../../README.md", "README.md", "../../docs/*.md", "../../examples/README.md"}

// codeSpans returns the code a Markdown document holds: the lines of its
// fenced blocks, and its inline code spans, each as one string.
func codeSpans(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	inBlock := false
	span := regexp.MustCompile("`([^`]+)`")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			out = append(out, line)
			continue
		}
		for _, m := range span.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// invocations finds "bqartemis WORD ..." in a piece of code and returns
// each one's words, up to the end of the command (a comment, a pipe, &&,
// ;, a quote that closes the command).
func invocations(code string) [][]string {
	var out [][]string
	for {
		i := strings.Index(code, "bqartemis")
		if i < 0 {
			return out
		}
		code = code[i+len("bqartemis"):]
		if code == "" || code[0] != ' ' {
			continue // bqartemis-validate, bqartemis@latest, bqartemis:
		}
		end := len(code)
		for _, stop := range []string{" #", "|", "&&", ";", "'", "\"", ")", "`", "\\"} {
			if j := strings.Index(code, stop); j >= 0 && j < end {
				end = j
			}
		}
		out = append(out, strings.Fields(code[:end]))
	}
}

// flagName is the flag a word names ("-json", "[-reason", "-id]..." ...),
// or "" when the word is no flag.
func flagName(w string) string {
	w = strings.TrimLeft(w, "[(")
	w = strings.TrimRight(w, "]).,:")
	if len(w) < 2 || w[0] != '-' || w == "--" {
		return ""
	}
	w = strings.TrimLeft(w, "-")
	if w == "" || unicode.IsDigit(rune(w[0])) {
		return ""
	}
	name, _, _ := strings.Cut(w, "=")
	return name
}

func isPlaceholder(w string) bool { return strings.ToUpper(w) == w }

func TestDocumentsNameOnlyCommandsAndFlagsThatExist(t *testing.T) {
	cmds := map[string]command{}
	for _, c := range commands() {
		cmds[c.name] = c
	}
	var global connFlags
	gfs := flag.NewFlagSet("global", flag.ContinueOnError)
	global.register(gfs, func(string) string { return "" })

	var files []string
	for _, pattern := range commandDocs {
		m, err := filepath.Glob(pattern)
		if err != nil || len(m) == 0 {
			t.Fatalf("%s: %v (no file)", pattern, err)
		}
		files = append(files, m...)
	}
	checked := 0
	for _, file := range files {
		for _, code := range codeSpans(t, file) {
			for _, words := range invocations(code) {
				// The connection flags may come before the command.
				k := 0
				for k < len(words) && flagName(words[k]) != "" {
					f := gfs.Lookup(flagName(words[k]))
					if f == nil {
						t.Errorf("%s: `bqartemis %s`: %s is no connection flag", file, strings.Join(words, " "), words[k])
						break
					}
					k++
					if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); (!ok || !bf.IsBoolFlag()) && !strings.Contains(words[k-1], "=") {
						k++ // its value
					}
				}
				if k >= len(words) || isPlaceholder(words[k]) {
					continue
				}
				name := words[k]
				if name == "help" {
					continue
				}
				c, ok := cmds[name]
				if !ok {
					t.Errorf("%s: `bqartemis %s`: no command %q", file, strings.Join(words, " "), name)
					continue
				}
				fs, _ := newFlagSet(c, &environment{getenv: func(string) string { return "" }})
				for _, w := range words[k+1:] {
					if n := flagName(w); n != "" && n != "h" && fs.Lookup(n) == nil {
						t.Errorf("%s: `bqartemis %s`: %s has no flag -%s", file, strings.Join(words, " "), name, n)
					}
				}
				checked++
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d bqartemis command lines found in %v: the scan lost them?", checked, files)
	}
	t.Logf("%d bqartemis command lines checked in %d documents", checked, len(files))
}

func TestInvocations(t *testing.T) {
	got := invocations("$ bqartemis inspect orders.dlq -json # all; go install x/cmd/bqartemis@latest; bqartemis-validate -h; (run 'bqartemis help')")
	if len(got) != 2 || strings.Join(got[0], " ") != "inspect orders.dlq -json" || strings.Join(got[1], " ") != "help" {
		t.Errorf("invocations: %q", got)
	}
	for w, want := range map[string]string{"-json": "json", "[-reason": "reason", "-id]...": "id", "-url=x": "url", "-1": "", "-": "", "QUEUE": ""} {
		if got := flagName(w); got != want {
			t.Errorf("flagName(%q) = %q, want %q", w, got, want)
		}
	}
}
