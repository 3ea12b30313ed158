// Package artemisctl runs local Apache ActiveMQ Artemis brokers for
// development and tests: it fetches the distribution with Maven, creates
// instances under <root>/.artemis/instances, configures their broker.xml
// (loopback acceptors, address and security settings, a replication pair's
// or a cluster node's settings), and starts, stops, kills and restarts them:
// a single instance, a replication pair (ha-*) and a cluster (cluster-*).
//
// scripts/artemis is a thin wrapper around its command (cmd/artemisctl):
// Main takes the same commands and environment variables and prints the
// same export lines. Go tests can call the Ctl methods directly.
package artemisctl

import (
	"errors"
	"fmt"
	"io"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/babelqueue/babelqueue-go-artemis/internal/redact"
)

// Version is the Artemis release the instances run.
const Version = "2.40.0"

// ExitError is a failure with the exit code the command ends with: 1 for
// an error (already logged), 2 for a usage error, 3 for "not running".
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Msg
}

// ExitCode is err's exit code: 0 for nil, an ExitError's code, else 1.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var e *ExitError
	if errors.As(err, &e) {
		return e.Code
	}
	return 1
}

// Ctl manages the brokers below one repository root.
type Ctl struct {
	Root string // the repository: brokers live in Root/.artemis
	Base string // Root/.artemis
	Dist string // the unpacked distribution

	env    []string // KEY=value, as os.Environ
	stdout io.Writer
	errMu  sync.Mutex
	stderr io.Writer

	StartTimeout time.Duration
	StopTimeout  time.Duration
}

// New returns a Ctl for root with the environment env (KEY=value entries,
// as os.Environ() gives them), printing export lines to stdout and progress
// to stderr. Invalid timeouts are the defaults (90 s and 30 s).
func New(root string, env []string, stdout, stderr io.Writer) *Ctl {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	c := &Ctl{Root: root, Base: filepath.Join(root, ".artemis"), env: append([]string(nil), env...), stdout: stdout, stderr: stderr}
	c.Dist = filepath.Join(c.Base, "apache-artemis-"+Version)
	// Maven keeps its cache under $HOME: make sure it is set.
	if c.getenv("HOME") == "" {
		if u, err := user.Current(); err == nil && u.HomeDir != "" {
			c.env = append(c.env, "HOME="+u.HomeDir)
		}
	}
	c.StartTimeout = seconds(c.getenv("ARTEMIS_START_TIMEOUT"), 90)
	c.StopTimeout = seconds(c.getenv("ARTEMIS_STOP_TIMEOUT"), 30)
	return c
}

func seconds(v string, def int) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		n = def
	}
	return time.Duration(n) * time.Second
}

// getenv is the value of key in the Ctl's environment (the last entry
// wins, as in a process environment built by appending).
func (c *Ctl) getenv(key string) string {
	v := ""
	for _, kv := range c.env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// isSet reports whether key is in the environment with a non-empty value.
func (c *Ctl) isSet(key string) bool { return c.getenv(key) != "" }

// childEnv is the environment of a broker or CLI process: the Ctl's
// without the variables the Artemis launcher reads for itself.
func (c *Ctl) childEnv() []string {
	var out []string
	for _, kv := range c.env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "ARTEMIS_INSTANCE", "ARTEMIS_HOME", "JAVA_ARGS":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// logf writes "artemis[NAME]: message" to stderr.
func (c *Ctl) logf(name, format string, args ...any) {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	fmt.Fprintf(c.stderr, "artemis[%s]: %s\n", name, fmt.Sprintf(format, args...))
}

// die logs "ERROR: message" and returns the error that ends the command
// with exit code 1.
func (c *Ctl) die(name, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	c.logf(name, "ERROR: %s", msg)
	return &ExitError{Code: 1, Msg: msg}
}

// rawStderr writes text to stderr as it is.
func (c *Ctl) rawStderr(text string) {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	_, _ = io.WriteString(c.stderr, text)
}

// printf writes to stdout (the export lines).
func (c *Ctl) printf(format string, args ...any) { fmt.Fprintf(c.stdout, format, args...) }

// ValidName reports whether name may name an instance: letters, digits,
// ".", "_" and "-", not starting with ".".
func ValidName(name string) bool {
	if name == "" || strings.HasPrefix(name, ".") {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}

// badName is the error for an instance name ValidName refuses (exit 2).
func (c *Ctl) badName(name string) error {
	c.rawStderr(fmt.Sprintf("scripts/artemis: bad instance name '%s' (use letters, digits, . _ -)\n", name))
	return &ExitError{Code: 2, Msg: "bad instance name " + name}
}

// urlencode percent-encodes every byte but letters, digits and "_.-~".
func urlencode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '_', ch == '.', ch == '-', ch == '~':
			b.WriteByte(ch)
		default:
			fmt.Fprintf(&b, "%%%02X", ch)
		}
	}
	return b.String()
}

// redactURL hides the password of a URL (the first "://user:password@")
// behind redact.Mask, and the user too when it is the password, as the
// library and bqartemis show a URL.
func redactURL(u string) string {
	loc := reURLPassword.FindStringSubmatchIndex(u)
	if loc == nil {
		return u
	}
	user, pass := u[loc[4]:loc[5]], u[loc[6]:loc[7]]
	if pass != "" && pass == user {
		return u[:loc[0]] + "://" + redact.Mask + ":" + redact.Mask + "@" + u[loc[1]:]
	}
	return u[:loc[0]] + u[loc[2]:loc[3]] + redact.Mask + "@" + u[loc[1]:]
}

// shellQuote quotes s as bash's printf %q does: ” for the empty string,
// $'...' when it holds a control or non-ASCII byte, else a backslash before
// each character the shell would read specially.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return ansiQuote(s)
		}
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch ch {
		case ' ', '\t', '\n', '\'', '"', '\\', '|', '&', ';', '(', ')', '<', '>', '!', '{', '}',
			'*', '[', '?', ']', '^', '$', '`', ',':
			b.WriteByte('\\')
		case '~':
			if i == 0 || s[i-1] == '=' || s[i-1] == ':' {
				b.WriteByte('\\')
			}
		case '#':
			if i == 0 {
				b.WriteByte('\\')
			}
		}
		b.WriteByte(ch)
	}
	return b.String()
}

func ansiQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch ch {
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		case '\'':
			b.WriteString(`\'`)
		case '\\':
			b.WriteString(`\\`)
		default:
			if ch < 0x20 || ch >= 0x7f {
				fmt.Fprintf(&b, `\%03o`, ch)
			} else {
				b.WriteByte(ch)
			}
		}
	}
	b.WriteString("'")
	return b.String()
}

// shq is s as one shell word: plain when it needs no quoting (URLs and
// paths), so a program can read the export lines without a shell; else as
// shellQuote.
func shq(s string) string {
	if reShellPlain.MatchString(s) {
		return s
	}
	return shellQuote(s)
}

var (
	reURLPassword = regexp.MustCompile(`(://([^:/@]*):)([^@]*)@`)
	reShellPlain  = regexp.MustCompile(`^[A-Za-z0-9_./:@,=+%-]*$`)
)

func nowMS() int64 { return time.Now().UnixMilli() }
