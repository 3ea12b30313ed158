package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The validate command checks message data against JSON Schemas. The
// validator is not in this program: bqartemis is built from the library's
// module, which carries no JSON Schema validator (the schema module does).
// So validate runs the schema module's program, bqartemis-validate, as a
// filter: bqartemis browses the queue with its own connection (its flags,
// TLS and credentials), takes each message as a consumer does
// (artemis.DecodeMessage: the version gate, the body read, the envelope's
// acceptance rules) and writes one line a message to the program's
// standard input (its -messages mode): the envelope of a message a
// consumer accepts, or the reason it is poison or version-gated. The
// program checks the envelopes' data and prints every verdict.
const (
	validateProgram = "bqartemis-validate"
	validateInstall = "go install github.com/babelqueue/babelqueue-go-artemis/schema/cmd/bqartemis-validate@latest"
	// envValidate names the program's path, instead of looking for it.
	envValidate = "BQARTEMIS_VALIDATE"
)

func setupValidate(fs *flag.FlagSet, env *environment) func(context.Context, []string) error {
	var bf browseFlags
	bf.register(fs)
	var dir, registry, file string
	fs.StringVar(&dir, "schemas", "", "the schema `directory` (or -registry): DIR/orders/created.json is the schema of urn:babel:orders:created")
	fs.StringVar(&registry, "registry", "", "the schema registry's `registry.json`, instead of -schemas: each entry's urn names its schema")
	fs.StringVar(&file, "file", "", "check the envelopes in this JSON `file` (one, an array, or one per line) instead of a queue")
	return func(ctx context.Context, args []string) error {
		hasDir, hasRegistry := strings.TrimSpace(dir) != "", strings.TrimSpace(registry) != ""
		switch {
		case hasDir && hasRegistry:
			return usagef("give -schemas DIR or -registry FILE, not both")
		case !hasDir && !hasRegistry:
			return usagef("-schemas DIR or -registry FILE is required")
		}
		if err := bf.check(); err != nil {
			return err
		}
		var queue string
		switch {
		case file != "" && len(args) > 0:
			return usagef("give a queue or -file, not both")
		case file == "":
			q, err := oneQueue(args, "queue (or -file FILE)")
			if err != nil {
				return err
			}
			queue = q
		}
		prog, err := validatorPath(env.getenv)
		if err != nil {
			return err
		}
		childArgs := []string{"-schemas", dir}
		if hasRegistry {
			childArgs = []string{"-registry", registry}
		}
		if bf.json {
			childArgs = append(childArgs, "-json")
		}
		if file != "" {
			return runValidator(exec.CommandContext(ctx, prog, append(childArgs, file)...), env, nil)
		}
		ctx, s, err := env.conn.open(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		n := 0
		err = runValidator(exec.CommandContext(ctx, prog, append(childArgs, "-messages")...), env, func(w io.Writer) error {
			return browse(ctx, s, queue, bf.idle, func(msg *amqp.Message) (bool, error) {
				n++
				if _, err := w.Write(validatorLine(msg)); err != nil {
					return false, fmt.Errorf("%s stopped reading: %w", validateProgram, err)
				}
				return bf.max == 0 || n < bf.max, nil
			})
		})
		if !bf.json {
			depth := int64(-1)
			if err == nil && bf.max > 0 && n >= bf.max {
				depth, _ = queueDepth(ctx, s, queue) // the count is a courtesy: n alone when it fails
			}
			fmt.Fprintf(env.stderr, "%d of %s on %s checked (browsed, nothing consumed)\n", n, plural(ofTotal(n, depth), "message"), queue)
		}
		return err
	}
}

// validatorPath finds bqartemis-validate: $BQARTEMIS_VALIDATE, else on
// PATH, else beside this program (go install puts both in one directory).
func validatorPath(getenv func(string) string) (string, error) {
	if p := strings.TrimSpace(getenv(envValidate)); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s: %w", envValidate, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath(validateProgram); err == nil {
		return p, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), validateProgram)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("validate needs %s, which is not installed (not on PATH, not beside %s); install it with\n  %s\n(a program of its own: the JSON Schema validator is kept out of %s and of the library's module)",
		validateProgram, programName, validateInstall, programName)
}

// runValidator runs the program with its output on ours. feed, when not
// nil, writes its standard input. The program's exit status 1 (a message
// is invalid, poison or version-gated) and 2 (its usage, or a schema directory
// that does not load) are errors: what went wrong was printed by it.
func runValidator(cmd *exec.Cmd, env *environment, feed func(io.Writer) error) error {
	cmd.Stdout, cmd.Stderr = env.stdout, env.stderr
	cmd.Env = childEnv(os.Environ())
	var stdin io.WriteCloser
	if feed != nil {
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			return err
		}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", validateProgram, err)
	}
	var feedErr error
	if feed != nil {
		feedErr = feed(stdin)
		_ = stdin.Close()
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		err = errors.New("invalid data found (see above)")
	case errors.As(err, &ee) && ee.ExitCode() == 2:
		err = fmt.Errorf("%s could not check (see above)", validateProgram)
	case err != nil:
		err = fmt.Errorf("%s: %w", validateProgram, err)
	}
	if feedErr != nil && err == nil {
		return feedErr
	}
	if feedErr != nil && !strings.Contains(feedErr.Error(), "stopped reading") {
		return errors.Join(feedErr, err)
	}
	return err
}

// childEnv is the environment without the broker's credentials: the
// validator never connects.
func childEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if strings.HasPrefix(kv, envPassword+"=") || strings.HasPrefix(kv, envURL+"=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// validatorLine is one message for the validator's -messages input, one
// JSON line: {"envelope":<the body>} for a message a consumer accepts, else
// {"refused":"poison"|"version_gated","urn":...,"error":<the reason>}.
func validatorLine(msg *amqp.Message) []byte {
	var line struct {
		Envelope json.RawMessage `json:"envelope,omitempty"`
		Refused  string          `json:"refused,omitempty"`
		URN      string          `json:"urn,omitempty"`
		Error    string          `json:"error,omitempty"`
	}
	env, err := artemis.DecodeMessage(msg)
	if err != nil {
		line.Refused, line.Error = "poison", err.Error()
		var de *artemis.DeliveryError
		if errors.As(err, &de) {
			line.Refused, line.URN, line.Error = de.Kind.String(), de.URN, de.Err.Error()
		}
	} else {
		line.Envelope, _ = bodyText(msg)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(line) != nil {
		// A body the library reads that encoding/json does not: the
		// library's own encoding of the same envelope.
		b.Reset()
		line.Envelope, err = env.Encode()
		if err == nil {
			err = enc.Encode(line)
		}
		if err != nil {
			b.Reset()
			line.Envelope, line.Refused, line.Error = nil, "poison", "the envelope cannot be re-encoded: "+err.Error()
			_ = enc.Encode(line)
		}
	}
	return b.Bytes()
}
