// Command bqartemis-schema checks a change of a message's data schema
// against the family registry's backward-compatibility rules (those of
// bqschema compat; see schema.CheckCompatibility):
//
//	go install github.com/babelqueue/babelqueue-go-artemis/schema/cmd/bqartemis-schema@latest
//	bqartemis-schema check [-strict] [-json] OLD NEW
//
// OLD and NEW are two versions of one URN's JSON Schema (say, the file on
// the main branch and in a pull request), or two versions of the family's
// registry.json (each URN of OLD must be in NEW, with a compatible
// schema; see schema.CheckRegistryCompatibility). It prints each breaking change,
// one per line by its path in the data ("addresses[].line: type changed
// ..."), then each keyword that differs but that the rules do not compare
// ($ref, allOf, format, ...), to review by hand.
//
// Exit status: 0 backward compatible, 1 a breaking change (with -strict,
// also an unchecked difference), 2 a usage error or a file that cannot be
// read or is not a schema.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/babelqueue/babelqueue-go-artemis/schema"
)

const programName = "bqartemis-schema"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: %s check [-strict] [-json] OLD NEW

Checks that NEW, a new version of the JSON Schema OLD of one URN's data, still takes every
data object OLD took (the family registry's backward-compatibility rules). OLD and NEW may
also be two versions of a registry.json: every URN of OLD must be in NEW, its schema
compatible. A breaking change
means: mint a new URN (urn:babel:orders:created.v2) instead of changing this one.
Exit status: 0 compatible, 1 breaking, 2 usage or read error.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintf(stdout, usage, programName)
			return 0
		}
		fmt.Fprintf(stderr, usage, programName)
		return 2
	}
	fs := flag.NewFlagSet(programName+" check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	strict := fs.Bool("strict", false, "count a difference the rules do not compare as breaking")
	asJSON := fs.Bool("json", false, `print {"compatible", "breaking", "unchecked"} as JSON`)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), usage+"\nflags:\n", programName)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 2 {
		fmt.Fprintf(stderr, "%s check: want two schema files, OLD and NEW; got %d arguments\n", programName, fs.NArg())
		return 2
	}
	oldPath, newPath := fs.Arg(0), fs.Arg(1)
	oldText, err := os.ReadFile(oldPath)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", programName, err)
		return 2
	}
	newText, err := os.ReadFile(newPath)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", programName, err)
		return 2
	}
	var c schema.Compatibility
	switch oldReg, newReg := isManifest(oldText), isManifest(newText); {
	case oldReg && newReg:
		c, err = schema.CheckRegistryCompatibility(oldPath, newPath)
	case oldReg || newReg:
		fmt.Fprintf(stderr, "%s check: one of OLD and NEW is a registry.json, the other a schema: compare two of a kind\n", programName)
		return 2
	default:
		c, err = schema.CheckCompatibility(oldText, newText)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", programName, err)
		return 2
	}
	failed := !c.Compatible() || (*strict && len(c.Unchecked) > 0)
	if *asJSON {
		out := struct {
			Compatible bool     `json:"compatible"`
			Breaking   []string `json:"breaking"`
			Unchecked  []string `json:"unchecked"`
		}{!failed, texts(c.Breaking), texts(c.Unchecked)}
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(out); err != nil {
			return 2
		}
	} else {
		if len(c.Breaking) == 0 {
			fmt.Fprintf(stdout, "%s -> %s: backward compatible\n", oldPath, newPath)
		} else {
			fmt.Fprintf(stdout, "%s -> %s: %d breaking change(s); mint a new URN instead:\n", oldPath, newPath, len(c.Breaking))
			for _, b := range c.Breaking {
				fmt.Fprintf(stdout, "  breaking: %s\n", b)
			}
		}
		for _, u := range c.Unchecked {
			fmt.Fprintf(stdout, "  review:   %s\n", u)
		}
	}
	if failed {
		return 1
	}
	return 0
}

// isManifest tells a registry.json (an object with a "schemas" list of
// objects) from a schema.
func isManifest(text []byte) bool {
	var m struct {
		Schemas []map[string]any `json:"schemas"`
	}
	return json.Unmarshal(text, &m) == nil && len(m.Schemas) > 0 && m.Schemas[0]["urn"] != nil
}

func texts(l []schema.Change) []string {
	out := make([]string, len(l))
	for i, c := range l {
		out[i] = c.String()
	}
	return out
}
