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
// one after another (one per line, say). Each is first taken as a consumer
// takes a message body (artemis.DecodeMessage, the rules Consumer.Handle
// applies), then its data is checked. It prints one result per message:
// valid, invalid with each violation by JSON pointer, no schema for its
// URN, poison (a consumer dead-letters it unread) or version-gated, each
// with its reason. It never connects to a broker: "bqartemis validate
// QUEUE" browses a queue and pipes its messages in with -messages, one a
// line, each already classified by bqartemis from the whole AMQP message
// (application properties and body section), never split.
//
// Exit status: 0 every message is valid or has no schema, 1 a message is
// invalid, poison or version-gated, 2 a usage error, a schema directory
// that does not load, or input that is not JSON.
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

	"github.com/Azure/go-amqp"
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
	Result     string      `json:"result"` // valid, invalid, no_schema, poison, version_gated
	Violations []violation `json:"violations,omitempty"`
	Error      string      `json:"error,omitempty"`
	// DeadLetter is the reason of a dead-letter record ("" for another message).
	DeadLetter string `json:"dead_letter_reason,omitempty"`
}

type violation struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// browsed is one line of -messages input, as bqartemis validate writes it:
// the envelope of a message a consumer accepts, or why it does not.
type browsed struct {
	Envelope json.RawMessage `json:"envelope,omitempty"`
	Refused  string          `json:"refused,omitempty"` // poison or version_gated
	URN      string          `json:"urn,omitempty"`
	Error    string          `json:"error,omitempty"`
}

type counts struct{ valid, invalid, noSchema, poison, gated int }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(programName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("schemas", "", "the schema `directory`: DIR/orders/created.json is the schema of urn:babel:orders:created")
	manifest := fs.String("registry", "", "the schema registry's `registry.json` (instead of -schemas): each entry's urn names its schema")
	asJSON := fs.Bool("json", false, "print one JSON object per message")
	messages := fs.Bool("messages", false, "read one browsed message a line, as bqartemis validate writes them (never split)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s (-schemas DIR | -registry registry.json) [-json] [-messages] [FILE | -]...\n\n"+
			"Checks each envelope read from FILE (- or none: standard input; one envelope, an array of\n"+
			"them, or several one after another) as a consumer takes it, then its data against the\n"+
			"schema of its URN.\n"+
			"Exit status: 0 all valid (or without a schema), 1 invalid, poison or version-gated,\n"+
			"2 usage or load error.\n\nflags:\n", programName)
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
		r := stdin
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
		each, classify := eachValue, checkEnvelope
		if *messages {
			each, classify = eachLine, checkBrowsed
		}
		err := each(r, func(raw json.RawMessage) error {
			index++
			res := classify(reg, raw)
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
	fmt.Fprintf(stderr, "%d messages: %d valid, %d invalid, %d without a schema, %d poison, %d version-gated\n",
		index, c.valid, c.invalid, c.noSchema, c.poison, c.gated)
	if c.invalid > 0 || c.poison > 0 || c.gated > 0 {
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
	case "version_gated":
		c.gated++
	default:
		c.poison++
	}
}

// eachValue calls fn with each envelope of a file: each top-level JSON
// value, and each element of a top-level array (a file's list of
// envelopes, never a message body: see eachLine).
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

// eachLine calls fn with each line of r, the -messages input: one JSON
// value a message, never split.
func eachLine(r io.Reader, fn func(json.RawMessage) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<30)
	for sc.Scan() {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		if !json.Valid(line) {
			return errors.New("not JSON: a -messages line is one JSON value")
		}
		if err := fn(append(json.RawMessage(nil), line...)); err != nil {
			return err
		}
	}
	return sc.Err()
}

// checkBrowsed checks one -messages line: a message bqartemis refused for
// the consumer's reason is reported with it; an envelope is checked.
func checkBrowsed(reg *schema.Registry, raw json.RawMessage) result {
	var b browsed
	if err := json.Unmarshal(raw, &b); err != nil || (b.Refused == "" && len(b.Envelope) == 0) {
		return result{Result: "poison", Error: "not a message line of bqartemis validate (install both programs from one version)"}
	}
	if b.Refused != "" {
		return result{Result: b.Refused, URN: b.URN, Error: b.Error}
	}
	return checkEnvelope(reg, b.Envelope)
}

// checkEnvelope takes one envelope as a consumer takes a message body
// (artemis.DecodeMessage: the same decoder and acceptance rules) and
// validates its data against the schema of its URN.
func checkEnvelope(reg *schema.Registry, raw json.RawMessage) result {
	env, err := artemis.DecodeMessage(&amqp.Message{Data: [][]byte{raw}})
	if err != nil {
		res := result{Result: "poison", Error: err.Error()}
		var de *artemis.DeliveryError
		if errors.As(err, &de) {
			res.Result, res.URN, res.Error = de.Kind.String(), de.URN, de.Err.Error()
		}
		// A poison record read back from a dead-letter queue: say so.
		if rec, derr := artemis.Decode(raw); derr == nil && rec.DeadLetter != nil {
			res.DeadLetter = rec.DeadLetter.Reason
		}
		return res
	}
	res := result{ID: env.Meta.ID, URN: env.URN}
	if env.DeadLetter != nil {
		res.DeadLetter = env.DeadLetter.Reason
	}
	if !reg.Has(env.URN) {
		res.Result = "no_schema"
		return res
	}
	err = reg.ValidatePayload(context.Background(), env.URN, env.Data)
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
	case "version_gated":
		fmt.Fprintf(&b, "%s: VERSION-GATED (a consumer dead-letters it as received): %s\n", who, r.Error)
	default:
		fmt.Fprintf(&b, "%s: POISON (a consumer dead-letters it unread): %s\n", who, r.Error)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
