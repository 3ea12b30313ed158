package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
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
		{[]string{"validate", "orders"}, "-schemas DIR or -registry FILE is required"},
		{[]string{"validate", "orders", "-schemas", "d", "-registry", "r.json"}, "not both"},
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
		if tc.code == 0 {
			out, _, code := runCLI(t, map[string]string{envValidate: fake}, "", "validate", "-file", "records.json", "-registry", "registry.json")
			if code != exitOK || !strings.Contains(out, "args: -registry registry.json records.json\n") {
				t.Errorf("-registry not passed on: exit %d %q", code, out)
			}
		}
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

// TestValidatorLine: each message is taken as a consumer takes it; only
// the body of one it accepts goes to the validator, the others with the
// consumer's reason, an array body whole.
func TestValidatorLine(t *testing.T) {
	env, err := artemis.NewEnvelope("urn:babel:orders:created", map[string]int{"a": 1}, artemis.EnvelopeQueue("orders"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	pretty := strings.Replace(string(body), `"data":`, "\n  \"data\": ", 1)
	v2 := strings.Replace(string(body), `"schema_version":1`, `"schema_version":2`, 1)
	gated := &amqp.Message{Value: string(body), ApplicationProperties: map[string]any{"bq_schema_version": "2"},
		Annotations: amqp.Annotations{"x-opt-jms-type": "urn:babel:orders:created"}}
	for _, tc := range []struct {
		name string
		msg  *amqp.Message
		want string
	}{
		{"envelope, compacted", &amqp.Message{Value: pretty}, `{"envelope":` + string(body) + "}\n"},
		{"envelope in data sections", &amqp.Message{Data: [][]byte{body[:9], body[9:]}}, `{"envelope":` + string(body) + "}\n"},
		{"empty array", &amqp.Message{Value: "[]"}, `{"refused":"poison","error":"artemis: invalid envelope: the body is JSON but not an object: it is an array"}` + "\n"},
		{"array of an envelope", &amqp.Message{Value: "[" + string(body) + "]"}, `{"refused":"poison","error":"artemis: invalid envelope: the body is JSON but not an object: it is an array"}` + "\n"},
		{"meta.schema_version 2", &amqp.Message{Value: v2}, `{"refused":"poison","error":"artemis: invalid envelope: meta.schema_version is 2, want 1"}` + "\n"},
		{"plain text", &amqp.Message{Value: "plain text"}, `"refused":"poison"`},
		{"sequence", &amqp.Message{Sequence: [][]any{{1}}}, `{"refused":"poison","error":"the body is an AMQP sequence section"}` + "\n"},
		{"gated", gated, `{"refused":"version_gated","urn":"urn:babel:orders:created","error":"bq_schema_version is \"2\", not \"1\""}` + "\n"},
	} {
		got := string(validatorLine(tc.msg))
		if got != tc.want && (!strings.HasPrefix(tc.want, `"`) || !strings.Contains(got, tc.want)) {
			t.Errorf("%s:\ngot  %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// TestIntegrationValidateBrowsesTheQueue: validate QUEUE hands every
// message to the program, one -messages line each, and consumes nothing.
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
	if !strings.Contains(out, "args: -schemas dir -messages\n") {
		t.Errorf("the program is not told to read messages: %s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var bodies []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "args: ") && !strings.HasPrefix(l, "env: ") {
			bodies = append(bodies, l)
		}
	}
	if len(bodies) != 3 || !strings.Contains(bodies[0], `{"envelope":{`) || !strings.Contains(bodies[0], `"data":{"order_id":1}`) ||
		!strings.Contains(bodies[1], `"data":{"orderId":2}`) || !strings.HasPrefix(bodies[2], `{"refused":"poison","error":"artemis: invalid envelope: the body is not valid JSON`) {
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
