// Command bqartemis is the operator's tool for BabelQueue queues on Apache
// ActiveMQ Artemis: it browses dead-letter records (inspect), moves them
// back to their queue (redrive), takes records off a queue (remove), lists
// and moves back what the broker itself dead-lettered or expired (inspect
// and redrive on DLQ, ExpiryQueue), browses any queue (peek), publishes one
// envelope (publish), reads the broker's queue counters (stats) and checks
// message data against JSON Schemas (validate).
//
//	go install github.com/babelqueue/babelqueue-go-artemis/cmd/bqartemis@latest
//	bqartemis help
//
// The broker is -url (repeatable: a live/backup list, tried in order),
// default $ARTEMIS_URL. The connection flags go before or after the
// command (bqartemis -url URL stats). The password comes from the URL
// (percent-encoded) or $ARTEMIS_PASSWORD, never from a flag (a flag shows
// in ps). No password, nor any piece of one, is ever printed. No command
// creates a queue: a queue that does not exist is an error naming it.
//
// Exit status: 0 done, 1 a runtime error (the broker, a record that could
// not be moved), 2 a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	programName = "bqartemis"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// command is one subcommand.
type command struct {
	name    string
	usage   string // the synopsis after the command name
	summary string
	// setup registers the command's flags and returns the function that
	// runs it once the flags and arguments are parsed.
	setup func(fs *flag.FlagSet, env *environment) func(ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"inspect", "QUEUE.dlq [-json] [-reason R] [-urn U] [-from QUEUE] [-since DURATION] [-max N] [-schemas DIR | -registry FILE] [-mask]",
			"browse dead-letter records without consuming them", setupInspect},
		{"redrive", "QUEUE.dlq [-to QUEUE] [-reason R | -all] [-urn U] [-from QUEUE] [-max N] [-dry-run] [-bypass]",
			"move dead-letter records back to their queue (attempts 0, dead_letter removed)", setupRedrive},
		{"remove", "QUEUE [-id ID]... [-reason R] [-urn U] [-from QUEUE] [-yes]",
			"take records off a queue (listed first; -yes removes them), e.g. -reason poison", setupRemove},
		{"peek", "QUEUE [-json] [-max N] [-schemas DIR | -registry FILE] [-mask]",
			"browse any queue without consuming it", setupPeek},
		{"publish", "QUEUE URN [JSON | -] [-trace-id ID] [-delay D] [-header K=V]... [-group G] [-ttl D] [-priority P] [-dup-detect]",
			"publish one envelope (data JSON object, - reads it from stdin; default {}) and print its meta.id", setupPublish},
		{"stats", "[QUEUE... | -address TOPIC] [-json]",
			"per-queue counters from the broker's management address (-address: a topic's subscriptions, each with its DLQ)", setupStats},
		{"scheduled", "QUEUE [-json] [-max N]",
			"list the messages waiting on a queue for their delivery time (scheduled retries, delayed publishes)", setupScheduled},
		{"validate", "(QUEUE | -file FILE) (-schemas DIR | -registry FILE) [-json] [-max N]", "check message data against JSON Schemas per URN (browsed, nothing consumed; runs bqartemis-validate)", setupValidate},
	}
}

// environment is what a command reads from outside its flags.
type environment struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	conn   connFlags
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run is the whole program: it returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		mainUsage(stderr)
		return exitUsage
	}
	globals, args, err := splitGlobals(args, getenv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		mainUsage(stdout)
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s: %s\n(before the command go only the connection flags: -url, -user, -tls-*, -timeout)\n", programName, err)
		return exitUsage
	case len(args) == 0:
		fmt.Fprintf(stderr, "%s: no command after the flags\n", programName)
		mainUsage(stderr)
		return exitUsage
	}
	name := args[0]
	// The command parses the global flags with its own, before them: a
	// flag given after the command wins over the same one given before.
	if name != "help" {
		cmdArgs := make([]string, 0, len(globals)+len(args))
		cmdArgs = append(cmdArgs, name)
		cmdArgs = append(cmdArgs, globals...)
		args = append(cmdArgs, args[1:]...)
	}
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && name == "help" {
			for _, c := range commands() {
				if c.name == args[1] {
					fs, _ := newFlagSet(c, &environment{stdout: stdout, stderr: stderr, getenv: getenv})
					fs.SetOutput(stdout)
					fs.Usage()
					return exitOK
				}
			}
			unknownCommand(stderr, args[1])
			return exitUsage
		}
		mainUsage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		env := &environment{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
		fs, runCmd := newFlagSet(c, env)
		rest, err := parseInterleaved(fs, args[1:])
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return exitOK
		}
		if err == nil {
			err = runMembers(ctx, c.name, env, rest, runCmd)
		}
		var ue *usageError
		switch {
		case err == nil:
			return exitOK
		case errors.As(err, &ue) || isFlagError(err):
			fmt.Fprintf(stderr, "%s %s: %s\n", programName, c.name, env.conn.scrub(err.Error()))
			fmt.Fprintf(stderr, "usage: %s %s %s\n(run '%s %s -h' for the flags)\n", programName, c.name, c.usage, programName, c.name)
			return exitUsage
		default:
			fmt.Fprintf(stderr, "%s %s: %s\n", programName, c.name, env.conn.scrub(err.Error()))
			return exitFailed
		}
	}
	unknownCommand(stderr, name)
	return exitUsage
}

// unknownCommand says that name is no command: with the nearest ones when
// name looks like a typo of them, else with the list of commands.
func unknownCommand(w io.Writer, name string) {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	names = append(names, "help")
	if near := suggest(name, names); len(near) > 0 {
		fmt.Fprintf(w, "%s: unknown command %q; did you mean %s?\n(run '%s help' for the commands)\n", programName, name, strings.Join(near, " or "), programName)
		return
	}
	fmt.Fprintf(w, "%s: unknown command %q\n", programName, name)
	mainUsage(w)
}

// splitGlobals takes the connection flags that come before the command
// (bqartemis -url URL stats, as git or kubectl take them) off args: it
// returns them, as written, and the command with its own arguments.
func splitGlobals(args []string, getenv func(string) string) (globals, rest []string, err error) {
	fs := flag.NewFlagSet(programName, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c connFlags
	c.register(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	rest = fs.Args()
	globals = args[:len(args)-len(rest)]
	if n := len(globals); n > 0 && globals[n-1] == "--" {
		globals = globals[:n-1]
	}
	return globals, rest, nil
}

// flagError marks an error the flag package returned.
type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }

func isFlagError(err error) bool {
	var fe *flagError
	return errors.As(err, &fe)
}

func newFlagSet(c command, env *environment) (*flag.FlagSet, func(context.Context, []string) error) {
	fs := flag.NewFlagSet(programName+" "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed once, by run
	runCmd := c.setup(fs, env)
	env.conn.register(fs, env.getenv)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "usage: %s %s %s\n\n%s.\n\nflags:\n", programName, c.name, c.usage, capitalize(c.summary))
		fs.PrintDefaults()
	}
	return fs, runCmd
}

// parseInterleaved parses flags that come before, between and after the
// positional arguments (bqartemis inspect orders.dlq -json), which the
// flag package alone stops at. "--" ends the flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &flagError{err}
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func mainUsage(w io.Writer) {
	fmt.Fprintf(w, "%s: the operator's tool for BabelQueue on Apache ActiveMQ Artemis\n\nusage: %s [CONNECTION FLAGS] COMMAND [ARGS] [FLAGS]\n\ncommands:\n", programName, programName)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `  help     this text; 'help COMMAND' or 'COMMAND -h' for a command's flags

connection (every command; before or after the command):
  -url URL            broker URL, repeatable (a live/backup list tried in order); default $ARTEMIS_URL
  -user NAME          SASL user (default: the URL's, else $ARTEMIS_USER); the password comes
                      from the URL or $ARTEMIS_PASSWORD, never from a flag
  -tls-ca FILE, -tls-cert FILE, -tls-key FILE, -tls-server-name NAME   for amqps:// URLs
  -timeout D          give up after D (default 1m)
  -cluster            each -url is one member of an Artemis cluster: inspect, redrive, remove, peek and
                      stats run on every member and report per member

exit status: 0 done, 1 runtime error, 2 usage error
`)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
