package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// fakeValidator writes a stand-in for bqartemis-validate: it prints its
// arguments, the ARTEMIS_ variables it was given, and then its standard
// input (when it is not a terminal argument run), and exits with $code.
func fakeValidator(t *testing.T, code int) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in validator is a shell script")
	}
	p := filepath.Join(t.TempDir(), validateProgram)
	script := "#!/bin/sh\necho \"args: $*\"\nenv | grep '^ARTEMIS_' | sort | sed 's/^/env: /'\ncase \"$*\" in *.json) ;; *) cat ;; esac\nexit " +
		string(rune('0'+code)) + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidateNeedsItsProgram(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	out, errOut, code := runCLI(t, nil, "", "validate", "-file", "x.json", "-schemas", "schemas")
	if code != exitFailed {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "validate needs bqartemis-validate, which is not installed") ||
		!strings.Contains(errOut, validateInstall) {
		t.Errorf("stderr does not say how to install it:\n%s", errOut)
	}
	_, errOut, code = runCLI(t, map[string]string{envValidate: filepath.Join(t.TempDir(), "missing")}, "",
		"validate", "-file", "x.json", "-schemas", "schemas")
	if code != exitFailed || !strings.Contains(errOut, "$"+envValidate) {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func TestValidateUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"validate", "orders"}, "-schemas DIR is required"},
		{[]string{"validate", "-schemas", "d"}, "want one queue (or -file FILE)"},
		{[]string{"validate", "orders", "-file", "x.json", "-schemas", "d"}, "not both"},
		{[]string{"validate", "a", "b", "-schemas", "d"}, "got 2 arguments"},
	} {
		_, errOut, code := runCLI(t, nil, "", tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestValidateFileRunsTheProgram(t *testing.T) {
	t.Setenv(envPassword, "s3cret-pw")
	t.Setenv(envURL, "amqp://u:s3cret-url@127.0.0.1:1")
	t.Setenv("ARTEMIS_VISIBLE", "yes")
	for _, tc := range []struct {
		code int
		exit int
		want string // in stderr
	}{
		{0, exitOK, ""},
		{1, exitFailed, "invalid data found (see above)"},
		{2, exitFailed, "bqartemis-validate could not check (see above)"},
	} {
		fake := fakeValidator(t, tc.code)
		out, errOut, code := runCLI(t, map[string]string{envValidate: fake}, "", "validate", "-file", "records.json", "-schemas", "dir", "-json")
		if code != tc.exit || !strings.Contains(errOut, tc.want) {
			t.Errorf("program exit %d: bqartemis exit %d, stderr %q", tc.code, code, errOut)
		}
		if !strings.Contains(out, "args: -schemas dir -json records.json\n") {
			t.Errorf("arguments not passed on: %q", out)
		}
		if strings.Contains(out, "s3cret") || !strings.Contains(out, "env: ARTEMIS_VISIBLE=yes") {
			t.Errorf("the program's environment: %q", out)
		}
	}
}

func TestValidatorLine(t *testing.T) {
	for _, tc := range []struct {
		msg  *amqp.Message
		want string
	}{
		{&amqp.Message{Value: "{\n  \"job\": \"urn:x\",\n  \"data\": {\"a\": 1}\n}"}, `{"job":"urn:x","data":{"a":1}}` + "\n"},
		{&amqp.Message{Data: [][]byte{[]byte(`{"a":`), []byte(`2}`)}}, `{"a":2}` + "\n"},
		{&amqp.Message{Value: "plain text"}, `"a body that is not JSON"` + "\n"},
		{&amqp.Message{Sequence: [][]any{{1}}}, `"a body that is not text"` + "\n"},
	} {
		if got := string(validatorLine(tc.msg)); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestIntegrationValidateBrowsesTheQueue: validate QUEUE hands every
// message body to the program, one JSON line each, and consumes nothing.
func TestIntegrationValidateBrowsesTheQueue(t *testing.T) {
	env := brokerEnv(t)
	queue := brokertest.Queue(t)
	cli(t, env, "publish", queue, "urn:babel:orders:created", `{"order_id": 1}`)
	cli(t, env, "publish", queue, "urn:babel:orders:created", `{"orderId": 2}`)
	c := brokertest.Require(t).Dial(t)
	c.Send(queue, &amqp.Message{Value: "not json at all"})

	env[envValidate] = fakeValidator(t, 1)
	out, errOut, code := runCLI(t, env, "", "validate", queue, "-schemas", "dir")
	if code != exitFailed || !strings.Contains(errOut, "3 of 3 messages on "+queue+" checked (browsed, nothing consumed)") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var bodies []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "args: ") && !strings.HasPrefix(l, "env: ") {
			bodies = append(bodies, l)
		}
	}
	if len(bodies) != 3 || !strings.Contains(bodies[0], `"data":{"order_id":1}`) ||
		!strings.Contains(bodies[1], `"data":{"orderId":2}`) || bodies[2] != `"a body that is not JSON"` {
		t.Fatalf("the program was given:\n%s", out)
	}
	if len(jsonLines(t, cli(t, env, "peek", queue, "-json"))) != 3 {
		t.Error("validate consumed messages")
	}
	out, _, _ = runCLI(t, env, "", "validate", queue, "-schemas", "dir", "-max", "1")
	if strings.Count(out, `"job"`) != 1 {
		t.Errorf("-max 1 sent more:\n%s", out)
	}
}
