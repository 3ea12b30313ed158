// Command bqartemis-validate checks the data of BabelQueue envelopes
// against a directory of JSON Schemas, one per URN (see the schema
// package: dir/orders/created.json is the schema of
// urn:babel:orders:created).
//
//	go install github.com/babelqueue/babelqueue-go-artemis/schema/cmd/bqartemis-validate@latest
//	bqartemis-validate (-schemas DIR | -registry registry.json) [-json] [FILE | -]...
//
// It reads envelopes from each FILE (- or none: standard input): a JSON
// file holding one envelope, an array of envelopes, or any number of them
// one after another (one per line, say). It prints one result per message:
// valid, invalid with each violation by JSON pointer, no schema for its
// URN, or not an envelope. It never connects to a broker: "bqartemis
// validate QUEUE" browses a queue and pipes its messages in.
//
// Exit status: 0 every message is valid or has no schema, 1 a message is
// invalid or not an envelope, 2 a usage error, a schema directory that does
// not load, or input that is not JSON.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/schema"
)

const programName = "bqartemis-validate"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// result is one message's verdict; it is also the -json line.
type result struct {
	Index      int         `json:"index"` // 1-based, over all inputs
	Source     string      `json:"source"`
	ID         string      `json:"id,omitempty"`
	URN        string      `json:"urn,omitempty"`
	Result     string      `json:"result"` // valid, invalid, no_schema, not_envelope
	Violations []violation `json:"violations,omitempty"`
	Error      string      `json:"error,omitempty"`
	// DeadLetter is the reason of a dead-letter record ("" for another message).
	DeadLetter string `json:"dead_letter_reason,omitempty"`
}

type violation struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

type counts struct{ valid, invalid, noSchema, notEnvelope int }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(programName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("schemas", "", "the schema `directory`: DIR/orders/created.json is the schema of urn:babel:orders:created")
	manifest := fs.String("registry", "", "the schema registry's `registry.json` (instead of -schemas): each entry's urn names its schema")
	asJSON := fs.Bool("json", false, "print one JSON object per message")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s (-schemas DIR | -registry registry.json) [-json] [FILE | -]...\n\n"+
			"Checks the data of each envelope read from FILE (- or none: standard input; one envelope,\n"+
			"an array of them, or several one after another) against the schema of its URN.\n"+
			"Exit status: 0 all valid (or without a schema), 1 invalid or not an envelope, 2 usage or load error.\n\nflags:\n", programName)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var src schema.Source
	switch hasDir, hasManifest := strings.TrimSpace(*dir) != "", strings.TrimSpace(*manifest) != ""; {
	case hasDir && hasManifest:
		fmt.Fprintf(stderr, "%s: give -schemas DIR or -registry FILE, not both\n", programName)
		return 2
	case hasDir:
		src = schema.Dir(*dir)
	case hasManifest:
		src = schema.RegistryFile(*manifest)
	default:
		fmt.Fprintf(stderr, "%s: -schemas DIR or -registry FILE is required\n", programName)
		fs.Usage()
		return 2
	}
	reg, err := schema.New(src)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", programName, err)
		return 2
	}
	for _, w := range reg.Warnings() {
		fmt.Fprintf(stderr, "%s: warning: %s\n", programName, w)
	}
	inputs := fs.Args()
	if len(inputs) == 0 {
		inputs = []string{"-"}
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	var c counts
	index := 0
	for _, in := range inputs {
		var r io.Reader = stdin
		name := "stdin"
		if in != "-" {
			f, err := os.Open(in)
			if err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", programName, err)
				return 2
			}
			defer f.Close()
			r, name = f, in
		}
		err := eachValue(r, func(raw json.RawMessage) error {
			index++
			res := check(reg, raw)
			res.Index, res.Source = index, name
			c.add(res.Result)
			return printResult(out, res, *asJSON)
		})
		if err != nil {
			out.Flush()
			fmt.Fprintf(stderr, "%s: %s: %v\n", programName, name, err)
			return 2
		}
	}
	out.Flush()
	fmt.Fprintf(stderr, "%d messages: %d valid, %d invalid, %d without a schema, %d not envelopes\n",
		index, c.valid, c.invalid, c.noSchema, c.notEnvelope)
	if c.invalid > 0 || c.notEnvelope > 0 {
		return 1
	}
	return 0
}

func (c *counts) add(result string) {
	switch result {
	case "valid":
		c.valid++
	case "invalid":
		c.invalid++
	case "no_schema":
		c.noSchema++
	default:
		c.notEnvelope++
	}
}

// eachValue calls fn with each message of r: each top-level JSON value,
// and each element of a top-level array.
func eachValue(r io.Reader, fn func(json.RawMessage) error) error {
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("not JSON: %w", err)
		}
		if len(raw) > 0 && raw[0] == '[' {
			var items []json.RawMessage
			if err := json.Unmarshal(raw, &items); err != nil {
				return err
			}
			for _, it := range items {
				if err := fn(it); err != nil {
					return err
				}
			}
			continue
		}
		if err := fn(raw); err != nil {
			return err
		}
	}
}

// check decodes one envelope and validates its data.
func check(reg *schema.Registry, raw json.RawMessage) result {
	if len(raw) == 0 || raw[0] != '{' {
		what := "not a JSON object"
		var s string
		if json.Unmarshal(raw, &s) == nil {
			what += ": " + truncate(s, 80) // bqartemis validate says why a body could not be sent
		}
		return result{Result: "not_envelope", Error: what}
	}
	env, err := artemis.Decode(raw)
	if err != nil {
		return result{Result: "not_envelope", Error: err.Error()}
	}
	res := result{ID: env.Meta.ID, URN: env.Job}
	if env.DeadLetter != nil {
		res.DeadLetter = env.DeadLetter.Reason
	}
	if strings.TrimSpace(env.Job) == "" {
		res.Result, res.Error = "not_envelope", "no URN (job)"
		return res
	}
	if !reg.Has(env.Job) {
		res.Result = "no_schema"
		return res
	}
	err = reg.ValidatePayload(context.Background(), env.Job, env.Data)
	if err == nil {
		res.Result = "valid"
		return res
	}
	res.Result = "invalid"
	var pe *artemis.PayloadError
	if errors.As(err, &pe) {
		for _, v := range pe.Violations {
			res.Violations = append(res.Violations, violation{Pointer: v.Pointer, Message: v.Message})
		}
	} else {
		res.Error = err.Error()
	}
	return res
}

func printResult(w io.Writer, r result, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	who := fmt.Sprintf("#%d", r.Index)
	if r.ID != "" {
		who += " " + r.ID
	}
	if r.URN != "" {
		who += " " + r.URN
	}
	if r.DeadLetter != "" {
		who += " (dead_letter " + r.DeadLetter + ")"
	}
	var b strings.Builder
	switch r.Result {
	case "valid":
		fmt.Fprintf(&b, "%s: valid\n", who)
	case "no_schema":
		fmt.Fprintf(&b, "%s: no schema for this URN, not checked\n", who)
	case "invalid":
		fmt.Fprintf(&b, "%s: INVALID\n", who)
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "    %s\n", artemis.PayloadViolation{Pointer: v.Pointer, Message: v.Message})
		}
		if r.Error != "" {
			fmt.Fprintf(&b, "    %s\n", r.Error)
		}
	default:
		fmt.Fprintf(&b, "%s: not an envelope: %s\n", who, r.Error)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "..."
	}
	return s
}
