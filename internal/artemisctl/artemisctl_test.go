package artemisctl

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The expected values are what bash's printf %q printed for the same
// strings (the old script quoted its export lines with it).
func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":                                 "''",
		"babel":                            "babel",
		"a b":                              `a\ b`,
		"it's":                             `it\'s`,
		"p@ss:w/rd":                        "p@ss:w/rd",
		"~home":                            `\~home`,
		"a=~b":                             `a=\~b`,
		"#x":                               `\#x`,
		"x#y":                              "x#y",
		"a,b":                              `a\,b`,
		"tab\tx":                           `$'tab\tx'`,
		"$HOME":                            `\$HOME`,
		"amqp://u:p@127.0.0.1:5672":        "amqp://u:p@127.0.0.1:5672",
		"/work/x/.artemis/instances/bgo-1": "/work/x/.artemis/instances/bgo-1",
		"a*b?[c]":                          `a\*b\?\[c\]`,
		"!{}^`|&;()<>\"\\":                 "\\!\\{\\}\\^\\`\\|\\&\\;\\(\\)\\<\\>\\\"\\\\",
		"amqp://a%40b:c%2Fd@127.0.0.1:1,x": "amqp://a%40b:c%2Fd@127.0.0.1:1\\,x",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestShq(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://u:p@127.0.0.1:1,amqp://u:p@127.0.0.1:2": "amqp://u:p@127.0.0.1:1,amqp://u:p@127.0.0.1:2",
		"a b": `a\ b`,
		"":    "",
	} {
		if got := shq(in); got != want {
			t.Errorf("shq(%q) = %s, want %s", in, got, want)
		}
	}
}

// The expected value is Python's urllib.parse.quote(s, safe="").
func TestURLEncode(t *testing.T) {
	if got, want := urlencode("p@ss w/rd:é~_.-+"), "p%40ss%20w%2Frd%3A%C3%A9~_.-%2B"; got != want {
		t.Errorf("urlencode = %s, want %s", got, want)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://babel:s3cret@127.0.0.1:5672":   "amqp://babel:xxxxx@127.0.0.1:5672",
		"amqp://babel:babel@127.0.0.1:5672":    "amqp://xxxxx:xxxxx@127.0.0.1:5672",
		"amqp://127.0.0.1:5672":                "amqp://127.0.0.1:5672",
		"amqp://u:a:b@h:1,amqp://u:c@h:2":      "amqp://u:xxxxx@h:1,amqp://u:c@h:2",
		"amqp://u%3Ax:p%40w@127.0.0.1:1/vhost": "amqp://u%3Ax:xxxxx@127.0.0.1:1/vhost",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{"bgo1": true, "a.b_c-D": true, ".hidden": false, "a/b": false, "a b": false, "": false} {
		if ValidName(name) != want {
			t.Errorf("ValidName(%q) = %v", name, !want)
		}
	}
}

// testCtl is a Ctl on a fresh root, with env, its stdout and stderr.
func testCtl(t *testing.T, env ...string) (*Ctl, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var out, errb bytes.Buffer
	return New(t.TempDir(), env, &out, &errb), &out, &errb
}

// writeState creates an instance directory with a state file.
func writeState(t *testing.T, c *Ctl, name string, lines ...string) *Instance {
	t.Helper()
	i, err := c.Instance(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(i.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(i.state, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return i
}
