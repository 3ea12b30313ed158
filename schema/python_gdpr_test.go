package schema

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The GDPR interop tests run the BabelQueue Python SDK (babelqueue 1.24.0
// with its gdpr extra, installed by scripts/python-peer setup) through
// testdata/interop/peer.py against the broker of ARTEMIS_URL, with
// BQ_PYTHON naming the venv's python.

// pythonPeer returns the python to run the peer with, or a skip.
func pythonPeer(t *testing.T) string {
	t.Helper()
	brokerURL(t)
	py := os.Getenv("BQ_PYTHON")
	if py == "" {
		t.Skip("BQ_PYTHON not set: the Python interop tests need scripts/python-peer setup (BQ_PYTHON=$(scripts/python-peer python))")
	}
	return py
}

// pyLine is one JSON line of the peer.
type pyLine struct {
	Event        string          `json:"event"`
	Message      string          `json:"message"`
	Envelope     json.RawMessage `json:"envelope"`
	Cleartext    json.RawMessage `json:"cleartext"`
	DecryptError string          `json:"decrypt_error"`
}

// runPeer runs peer.py with args until it prints "done" (its stdin stays
// open until then, so a consume is not stopped early) and returns its lines.
func runPeer(t *testing.T, python string, args ...string) []pyLine {
	t.Helper()
	peer, err := filepath.Abs(filepath.Join("..", "testdata", "interop", "peer.py"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{peer, "--url", os.Getenv("ARTEMIS_URL")}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []pyLine
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	for sc.Scan() {
		var l pyLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("peer printed %q", sc.Text())
		}
		lines = append(lines, l)
		if l.Event == "error" {
			t.Fatalf("peer %s: %s", args[0], l.Message)
		}
		if l.Event == "done" {
			break
		}
	}
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("peer %s: %v\n%s", args[0], err, strings.ReplaceAll(stderr.String(), os.Getenv("ARTEMIS_PASSWORD"), "xxxxx"))
	}
	return lines
}

// TestBrokerPythonGDPRInterop: on the broker, the Python SDK encrypts the
// marked fields and this module decrypts them before the check and the
// handler; this module encrypts and the Python SDK decrypts; and a
// consumer without the cipher dead-letters the Python message, whose
// encrypted number fails the schema (what the library did before).
func TestBrokerPythonGDPRInterop(t *testing.T) {
	python := pythonPeer(t)
	v, c := loadVectors(t)
	tc := v.Cases[1] // containers: a marked object, array, number, array items, nullable
	schemaFile, err := filepath.Abs(filepath.Join("testdata", "gdpr", tc.Schema))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	const urn = "urn:babel:interop:gdpr"
	plain, err := New(Bytes(urn, doc))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := plain.Encrypting(c)
	if err != nil {
		t.Fatal(err)
	}
	want := decodeAny(t, tc.Cleartext)
	gdprArgs := []string{"--urn", urn, "--gdpr-schema", schemaFile, "--gdpr-key", v.KeyHex}
	client := dial(t, brokerURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// Python encrypts, Go decrypts.
	qPy := uniqueQueue("gdpr-py2go")
	runPeer(t, python, append([]string{"publish", "--queue", qPy, "--data", string(tc.Cleartext)}, gdprArgs...)...)
	var mu sync.Mutex
	var seen json.RawMessage
	var body string
	got := make(chan struct{}, 1)
	cons, err := artemis.NewConsumer(artemis.Handlers{urn: func(_ context.Context, env *artemis.Envelope, msg *amqp.Message) error {
		mu.Lock()
		seen, body = env.Data, msg.Value.(string)
		mu.Unlock()
		got <- struct{}{}
		return nil
	}}, enc.ConsumerOption(), artemis.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	consume(ctx, t, client, qPy, cons, got)
	mu.Lock()
	if !reflect.DeepEqual(decodeAny(t, seen), want) {
		t.Errorf("Go decrypted the Python message to\n%s\nwant\n%s", seen, tc.Cleartext)
	}
	for _, secret := range []string{"ayse@", "Yılmaz", "5250", "+90 555"} {
		if strings.Contains(body, secret) {
			t.Errorf("the Python message shows %q on the wire: %s", secret, body)
		}
	}
	mu.Unlock()

	// Go encrypts, Python decrypts.
	qGo := uniqueQueue("gdpr-go2py")
	pub, err := client.Publisher(ctx, qGo, enc.PublishOption())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, artemis.Job(urn, tc.Cleartext)); err != nil {
		t.Fatal(err)
	}
	lines := runPeer(t, python, append([]string{"consume", "--queue", qGo, "--max", "1", "--idle", "30"}, gdprArgs...)...)
	var handled *pyLine
	for i := range lines {
		if lines[i].Event == "handled" {
			handled = &lines[i]
		}
	}
	switch {
	case handled == nil:
		t.Fatalf("the Python consumer handled nothing: %+v", lines)
	case handled.DecryptError != "":
		t.Fatalf("Python could not decrypt the Go message: %s", handled.DecryptError)
	case !reflect.DeepEqual(decodeAny(t, handled.Cleartext), want):
		t.Errorf("Python decrypted the Go message to\n%s\nwant\n%s", handled.Cleartext, tc.Cleartext)
	}
	var sent struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(handled.Envelope, &sent); err != nil {
		t.Fatal(err)
	}
	if s := string(sent.Data["salary"]); !strings.HasPrefix(s, `"`) || strings.Contains(s, "5250") {
		t.Errorf("the Go message's salary on the wire: %s", s)
	}

	// Without the cipher: the encrypted salary is a string to the schema.
	qPlain := uniqueQueue("gdpr-nocipher")
	runPeer(t, python, append([]string{"publish", "--queue", qPlain, "--data", string(tc.Cleartext)}, gdprArgs...)...)
	dead := make(chan struct{}, 1)
	var record *artemis.Envelope
	dlqCons, err := artemis.NewConsumer(artemis.Handlers{urn: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		mu.Lock()
		record = env
		mu.Unlock()
		dead <- struct{}{}
		return nil
	}}, artemis.WithLogger(nil), artemis.WithoutDeadLetter())
	if err != nil {
		t.Fatal(err)
	}
	noCipher, err := artemis.NewConsumer(artemis.Handlers{urn: func(context.Context, *artemis.Envelope, *amqp.Message) error {
		t.Error("the handler ran without the cipher")
		return nil
	}}, plain.ConsumerOption(), artemis.WithLogger(nil), artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- client.Consume(cctx, qPlain, noCipher) }()
	consume(ctx, t, client, qPlain+".dlq", dlqCons, dead)
	stop()
	if err := <-done; err != nil && ctx.Err() == nil && cctx.Err() == nil {
		t.Errorf("Consume %s: %v", qPlain, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if record.DeadLetter == nil || record.DeadLetter.Reason != artemis.ReasonFailed || record.DeadLetter.Error == nil ||
		!strings.Contains(*record.DeadLetter.Error, "/salary: must be number, not string") {
		t.Errorf("without the cipher: %+v", record.DeadLetter)
	}
}

// consume runs cons on queue until one message was handled (got), then
// stops it.
func consume(ctx context.Context, t *testing.T, client *artemis.Client, queue string, cons *artemis.Consumer, got <-chan struct{}) {
	t.Helper()
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- client.Consume(cctx, queue, cons)
	}()
	select {
	case <-got:
	case <-ctx.Done():
		t.Errorf("nothing handled on %s", queue)
	}
	stop()
	if err := <-done; err != nil && cctx.Err() == nil {
		t.Errorf("Consume %s: %v", queue, err)
	}
}
