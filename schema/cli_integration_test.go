package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

// buildTools builds bqartemis (from the library's module) and
// bqartemis-validate into one directory, as go install would.
func buildTools(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, pkg := range []string{
		"github.com/babelqueue/babelqueue-go-artemis/cmd/bqartemis",
		"github.com/babelqueue/babelqueue-go-artemis/schema/cmd/bqartemis-validate",
	} {
		cmd := exec.Command("go", "build", "-o", dir, pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return dir
}

// tool runs bqartemis from bin with bin first on PATH.
func tool(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "bqartemis"), args...)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestBrokerValidateCommand: bqartemis validate QUEUE prints the verdict
// of every message on the queue against testdata/schemas and consumes
// nothing; -file checks a JSON file the same way.
func TestBrokerValidateCommand(t *testing.T) {
	url := brokerURL(t)
	bin := buildTools(t)
	client := dial(t, url)
	q := uniqueQueue("schema-validate")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pub, err := client.Publisher(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, 3)
	for _, m := range []struct{ urn, data string }{
		{"urn:babel:orders:created", `{"order_id":1042,"currency":"EUR"}`},
		{"urn:babel:orders:created", `{"order_id":0,"currency":"GBP"}`},
		{"urn:babel:orders:refunded", `{"whatever":1}`},
	} {
		id, err := pub.Publish(ctx, artemis.Job(m.urn, json.RawMessage(m.data)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	schemas := filepath.Join("testdata", "schemas")

	out, errOut, code := tool(t, bin, "validate", q, "-schemas", schemas)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (an invalid message)\n%s%s", code, out, errOut)
	}
	want := "#1 " + ids[0] + " urn:babel:orders:created: valid\n" +
		"#2 " + ids[1] + " urn:babel:orders:created: INVALID\n" +
		`    /currency: must be one of "USD", "EUR", "TRY"` + "\n" +
		"    /order_id: must be >= 1\n" +
		"#3 " + ids[2] + " urn:babel:orders:refunded: no schema for this URN, not checked\n"
	if out != want {
		t.Errorf("output\n%s\nwant\n%s", out, want)
	}
	for _, s := range []string{"3 messages: 1 valid, 1 invalid, 1 without a schema, 0 poison, 0 version-gated",
		"3 messages on " + q + " checked (browsed, nothing consumed)", "invalid data found"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr does not say %q:\n%s", s, errOut)
		}
	}
	if u, err := neturl.Parse(url); err == nil && u.User != nil && strings.Contains(out+errOut, u.User.String()+"@") {
		t.Errorf("a credential was printed:\n%s%s", out, errOut)
	}

	// Nothing was consumed: the three messages are all still there.
	got := newReceived()
	cons, err := artemis.NewConsumer(artemis.Handlers{
		"urn:babel:orders:created": got.handler, "urn:babel:orders:refunded": got.handler,
	}, artemis.WithoutDeadLetter())
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- client.Consume(cctx, q, cons) }()
	envs := got.wait(t, 3, 30*time.Second)
	got.none(t, 300*time.Millisecond)
	stop()
	if err := <-done; err != nil {
		t.Error(err)
	}
	for i, env := range envs {
		if env.Meta.ID != ids[i] {
			t.Errorf("message %d is %s, want %s", i, env.Meta.ID, ids[i])
		}
	}

	// A JSON file: an array of two envelopes.
	a, _ := artemis.NewEnvelope("urn:babel:payments:captured", json.RawMessage(`{"payment_id":"p1","lines":["a",1]}`))
	b, _ := artemis.NewEnvelope("urn:babel:payments:captured", json.RawMessage(`{"payment_id":"p1","lines":["a","b"]}`))
	ab, _ := a.Encode()
	bb, _ := b.Encode()
	file := filepath.Join(t.TempDir(), "records.json")
	if err := os.WriteFile(file, []byte("["+string(ab)+",\n"+string(bb)+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = tool(t, bin, "validate", "-file", file, "-schemas", schemas, "-json")
	if code != 1 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"result":"valid"`) ||
		!strings.Contains(lines[1], `"violations":[{"pointer":"/lines/1","message":"must be integer, not string"}]`) {
		t.Errorf("output:\n%s", out)
	}
}

// TestBrokerValidateReportsWhatTheConsumerRefuses: the messages a consumer
// poisons or gates are reported as such, each with the consumer's reason,
// and validate exits non-zero; then a consumer on the same queue hands to
// its handlers exactly the messages validate called valid or unchecked and
// reports the others with the same kind.
func TestBrokerValidateReportsWhatTheConsumerRefuses(t *testing.T) {
	url := brokerURL(t)
	bin := buildTools(t)
	client := dial(t, url)
	q := uniqueQueue("schema-validate-poison")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	env, err := artemis.NewEnvelope("urn:babel:orders:created", json.RawMessage(`{"order_id":7,"currency":"EUR"}`), artemis.EnvelopeQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	body, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	delete(fields, "meta")
	delete(fields, "trace_id")
	bare, _ := json.Marshal(fields)
	v2 := strings.Replace(string(body), `"schema_version":1`, `"schema_version":2`, 1)
	raw := []struct {
		body string
		prop any // bq_schema_version, nil: none
	}{
		{"[]", nil},
		{"[" + string(body) + "]", nil},
		{string(bare), nil},
		{v2, nil},
		{string(body), "2"},
		{string(body), nil},
	}
	conn, err := amqp.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := queuelink.Sender(ctx, sess, q)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range raw {
		m := &amqp.Message{Value: r.body, Annotations: amqp.Annotations{"x-opt-jms-type": "urn:babel:orders:created"}}
		if r.prop != nil {
			m.ApplicationProperties = map[string]any{"bq_schema_version": r.prop}
		}
		if err := queuelink.SendAccepted(ctx, snd, m); err != nil {
			t.Fatal(err)
		}
	}
	pub, err := client.Publisher(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	otherID, err := pub.Publish(ctx, artemis.Job("urn:babel:orders:refunded", json.RawMessage(`{"whatever":1}`)))
	if err != nil {
		t.Fatal(err)
	}

	out, errOut, code := tool(t, bin, "validate", q, "-schemas", filepath.Join("testdata", "schemas"))
	if code != 1 {
		t.Fatalf("exit %d, want 1 (poison and gated messages)\n%s%s", code, out, errOut)
	}
	const poison = " urn:babel:orders:created: POISON (a consumer dead-letters it unread): artemis: invalid envelope: "
	want := "#1" + poison + "the body is JSON but not an object: it is an array\n" +
		"#2" + poison + "the body is JSON but not an object: it is an array\n" +
		"#3" + poison + "meta is not an object: it is missing\n" +
		"#4" + poison + "meta.schema_version is 2, want 1\n" +
		`#5 urn:babel:orders:created: VERSION-GATED (a consumer dead-letters it as received): bq_schema_version is "2", not "1"` + "\n" +
		"#6 " + env.Meta.ID + " urn:babel:orders:created: valid\n" +
		"#7 " + otherID + " urn:babel:orders:refunded: no schema for this URN, not checked\n"
	if out != want {
		t.Errorf("output\n%s\nwant\n%s", out, want)
	}
	for _, s := range []string{"7 messages: 1 valid, 0 invalid, 1 without a schema, 4 poison, 1 version-gated",
		"7 messages on " + q + " checked (browsed, nothing consumed)"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr does not say %q:\n%s", s, errOut)
		}
	}

	// The consumer agrees, message by message.
	got := newReceived()
	var mu sync.Mutex
	var refused []error
	cons, err := artemis.NewConsumer(artemis.Handlers{
		"urn:babel:orders:created": got.handler, "urn:babel:orders:refunded": got.handler,
	}, artemis.WithOnError(func(_ context.Context, err error, _ *artemis.Envelope, _ *amqp.Message) {
		mu.Lock()
		refused = append(refused, err)
		mu.Unlock()
		got.ch <- struct{}{}
	}), artemis.WithoutDeadLetter())
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- client.Consume(cctx, q, cons) }()
	got.wait(t, 7, 30*time.Second)
	stop()
	if err := <-done; err != nil {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got.envs) != 2 || got.envs[0].Meta.ID != env.Meta.ID || got.envs[1].Meta.ID != otherID {
		t.Errorf("the handlers got %d messages, want the 2 validate accepted", len(got.envs))
	}
	kinds := map[error]int{}
	for _, err := range refused {
		for _, k := range []error{artemis.ErrPoison, artemis.ErrVersionGated} {
			if errors.Is(err, k) {
				kinds[k]++
			}
		}
	}
	if len(refused) != 5 || kinds[artemis.ErrPoison] != 4 || kinds[artemis.ErrVersionGated] != 1 {
		t.Errorf("the consumer refused %v, want 4 poison and 1 version-gated", refused)
	}
}
