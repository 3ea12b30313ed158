package integration_test

// Interop with the real BabelQueue Python SDK (babelqueue[artemis] on PyPI, over
// python-qpid-proton) on one Artemis broker. The Python side is
// testdata/interop/peer.py, run as a subprocess with the venv's python that
// `scripts/python-peer setup` installs; it prints one JSON object per line.
//
// These tests run when ARTEMIS_URL is set and BQ_PYTHON names that python
// (scripts/interop sets both). They use only the library's exported API and
// internal/brokertest.
//
// What is asserted is our side of the contract. What the Python SDK does
// differently (it retries by re-publishing, it dead-letters with one more
// attempt, it writes no subject or message-id ...) is written down in the
// README's Interop section; where a test checks it, the check is named
// "observed Python behaviour" so a change in the SDK shows up.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// pyEnvPython names the python of the venv scripts/python-peer set up.
const pyEnvPython = "BQ_PYTHON"

// pyBigInt is above 2^53: a float64 round trip would turn it into ...992.
const pyBigInt = "9007199254740993"

// pyTimeout bounds one peer process and every wait in these tests.
const pyTimeout = 90 * time.Second

// pyRequire returns the broker and the python, or skips the test.
func pyRequire(t *testing.T) (*brokertest.Broker, string) {
	t.Helper()
	b := brokertest.Require(t)
	python := os.Getenv(pyEnvPython)
	if python == "" {
		t.Skip("python interop skipped: " + pyEnvPython + " is not set; run scripts/interop " +
			"(it installs babelqueue[artemis] with scripts/python-peer setup and sets " + pyEnvPython + ")")
	}
	return b, python
}

// pyBrokerURL is the broker URL with the credentials in it (how the Python
// SDK's ArtemisTransport takes them).
func pyBrokerURL(t *testing.T, b *brokertest.Broker) string {
	t.Helper()
	u, err := url.Parse(b.URL)
	require.NoError(t, err)
	if u.User == nil && b.User != "" {
		u.User = url.UserPassword(b.User, b.Password)
	}
	return u.String()
}

// pyLine is one JSON line of the peer.
type pyLine struct {
	Event    string          `json:"event"`
	ID       string          `json:"id"`
	Queue    string          `json:"queue"`
	Outcome  string          `json:"outcome"`
	Envelope json.RawMessage `json:"envelope"`
	Message  string          `json:"message"`
	Redriven int             `json:"redriven"`
	Skipped  int             `json:"skipped"`
	Items    []pyRedriveItem `json:"items"`
	raw      string
}

type pyRedriveItem struct {
	MessageID string `json:"message_id"`
	TraceID   string `json:"trace_id"`
	URN       string `json:"urn"`
	Reason    string `json:"reason"`
	To        string `json:"to"`
	Redriven  bool   `json:"redriven"`
}

// pyProc is one running peer.
type pyProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  interface{ Close() error }
	lines  chan pyLine
	stderr *bytes.Buffer
	secret string
	done   chan error
	cancel context.CancelFunc
}

// pyStart runs peer.py with args. The process is killed when the test ends.
func pyStart(t *testing.T, b *brokertest.Broker, python string, args ...string) *pyProc {
	t.Helper()
	peer, err := filepath.Abs(filepath.Join("..", "testdata", "interop", "peer.py"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), pyTimeout)
	cmd := exec.CommandContext(ctx, python, append([]string{peer, "--url", pyBrokerURL(t, b)}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	p := &pyProc{t: t, cmd: cmd, stderr: &bytes.Buffer{}, secret: b.Password, cancel: cancel}
	cmd.Stderr = &pySyncWriter{buf: p.stderr}
	p.stdin, p.lines, p.done = startLinePeer(t, cmd, func(text string) pyLine {
		var l pyLine
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			l = pyLine{Event: "unparsed", Message: err.Error()}
		}
		l.raw = text
		return l
	})
	t.Cleanup(func() {
		cancel()
		if t.Failed() {
			t.Logf("peer %s stderr:\n%s", strings.Join(args, " "), p.redact(p.stderr.String()))
		}
	})
	return p
}

func (p *pyProc) redact(s string) string { return maskSecret(s, p.secret) }

// next returns the next line of the peer; it fails the test on an error line,
// on end of output and after pyTimeout.
func (p *pyProc) next() pyLine {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("the peer ended early: %v\nstderr:\n%s", <-p.done, p.redact(p.stderr.String()))
		}
		if l.Event == "error" || l.Event == "unparsed" {
			p.t.Fatalf("peer: %s", p.redact(l.raw))
		}
		return l
	case <-time.After(pyTimeout):
		p.t.Fatalf("no line from the peer in %s", pyTimeout)
	}
	return pyLine{}
}

// until reads lines up to and including the first of event, and returns them.
func (p *pyProc) until(event string) []pyLine {
	p.t.Helper()
	var got []pyLine
	for {
		l := p.next()
		got = append(got, l)
		if l.Event == event {
			return got
		}
	}
}

// finish closes the peer's stdin (a consume stops then), reads every line
// left and checks the exit status.
func (p *pyProc) finish() []pyLine {
	p.t.Helper()
	_ = p.stdin.Close()
	var got []pyLine
	for l := range p.lines {
		if l.Event == "error" || l.Event == "unparsed" {
			p.t.Errorf("peer: %s", p.redact(l.raw))
		}
		got = append(got, l)
	}
	if err := <-p.done; err != nil {
		p.t.Fatalf("peer exited: %v\nstderr:\n%s", err, p.redact(p.stderr.String()))
	}
	return got
}

// pyRun runs one peer command until it says done (stdin stays open until
// then: a consume stops when it closes) and returns all its lines.
func pyRun(t *testing.T, b *brokertest.Broker, python string, args ...string) []pyLine {
	t.Helper()
	p := pyStart(t, b, python, args...)
	got := p.until("done")
	return append(got, p.finish()...)
}

// startLinePeer starts cmd, an interop peer that prints one JSON line per
// event, with its stdin and stdout piped. Each stdout line goes through
// parse to lines, which is closed when the output ends; done then receives
// cmd.Wait's error.
func startLinePeer[L any](t *testing.T, cmd *exec.Cmd, parse func(text string) L) (stdin io.WriteCloser, lines chan L, done chan error) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "start %s", cmd.Path)
	lines, done = make(chan L, 4096), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
		for sc.Scan() {
			lines <- parse(sc.Text())
		}
		close(lines)
		done <- cmd.Wait()
	}()
	return stdin, lines, done
}

type pySyncWriter struct {
	mu  sync.Mutex
	buf *bytes.Buffer
}

func (w *pySyncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

func pyEvents(lines []pyLine, event string) []pyLine {
	var got []pyLine
	for _, l := range lines {
		if l.Event == event {
			got = append(got, l)
		}
	}
	return got
}

// pyDecodeHandled decodes the envelope a Python handler saw.
func pyDecodeHandled(t *testing.T, l pyLine) *artemis.Envelope {
	t.Helper()
	env, err := artemis.Decode(l.Envelope)
	require.NoError(t, err, "the envelope the Python handler saw: %s", l.Envelope)
	return env
}

// pyJSONEqual compares two JSON texts as values, numbers as their literals
// (so 9007199254740993 never equals 9007199254740992).
func pyJSONEqual(t *testing.T, want, got []byte) {
	t.Helper()
	decode := func(b []byte) any {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		require.NoError(t, d.Decode(&v), "json %s", b)
		return v
	}
	if !reflect.DeepEqual(decode(want), decode(got)) {
		t.Errorf("JSON differs:\nwant %s\ngot  %s", want, got)
	}
}

// pyBody is the message body as bytes: an AMQP value string or binary, or the
// data sections.
func pyBody(t *testing.T, msg *amqp.Message) []byte {
	t.Helper()
	switch v := msg.Value.(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	case nil:
		return bytes.Join(msg.Data, nil)
	default:
		t.Fatalf("body is an AMQP value of type %T", v)
		return nil
	}
}

// pyBodyKind names the body section, for the log.
func pyBodyKind(msg *amqp.Message) string {
	switch msg.Value.(type) {
	case string:
		return "amqp-value string"
	case []byte:
		return "amqp-value binary"
	case nil:
		if len(msg.Data) > 0 {
			return fmt.Sprintf("%d data section(s)", len(msg.Data))
		}
		return "no body"
	default:
		return fmt.Sprintf("amqp-value %T", msg.Value)
	}
}

// pyRoutedOn says which slot the contract's routing (section 3) takes the URN
// from on msg, and the URN found there.
func pyRoutedOn(msg *amqp.Message, body []byte) (slot, urn string) {
	if v, ok := msg.Annotations[artemis.AnnotationJMSType].(string); ok && strings.TrimSpace(v) != "" {
		return "annotation " + artemis.AnnotationJMSType, v
	}
	if msg.Properties != nil && msg.Properties.Subject != nil && strings.TrimSpace(*msg.Properties.Subject) != "" {
		return "properties.subject", *msg.Properties.Subject
	}
	if env, err := artemis.Decode(body); err == nil {
		return "body URN", env.URN
	}
	return "none", ""
}

// pyWire describes what a message carries in the slots the contract uses.
func pyWire(msg *amqp.Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "body=%s", pyBodyKind(msg))
	fmt.Fprintf(&b, " annotations=%v", msg.Annotations)
	if p := msg.Properties; p != nil {
		fmt.Fprintf(&b, " message-id=%v correlation-id=%v subject=%v content-type=%v creation-time=%v",
			p.MessageID, p.CorrelationID, pyStr(p.Subject), pyStr(p.ContentType), p.CreationTime)
	} else {
		b.WriteString(" properties=none")
	}
	fmt.Fprintf(&b, " application-properties=%v", msg.ApplicationProperties)
	if h := msg.Header; h != nil {
		fmt.Fprintf(&b, " durable=%v priority=%d delivery-count=%d", h.Durable, h.Priority, h.DeliveryCount)
	} else {
		b.WriteString(" header=none")
	}
	return b.String()
}

func pyStr(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// pyDial connects a Client to the broker; it is closed when the test ends.
func pyDial(t *testing.T, b *brokertest.Broker) *artemis.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{b.URL}, &artemis.ClientOptions{Username: b.User, Password: b.Password})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// pyConsume runs cons on queue in the background; the returned stop ends it
// and checks that Consume returned nil within pyTimeout.
func pyConsume(t *testing.T, c *artemis.Client, queue string, cons *artemis.Consumer) (stop func()) {
	t.Helper()
	return testkit.ConsumeInBackground(t, c, queue, cons, pyTimeout)
}

// pyDelivery is one delivery a Go handler saw.
type pyDelivery struct {
	env *artemis.Envelope
	msg *amqp.Message
}

func pyWait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(pyTimeout):
		t.Fatalf("timed out after %s waiting for %s", pyTimeout, what)
	}
	var zero T
	return zero
}

func pyPublisher(t *testing.T, c *artemis.Client, queue string) *artemis.ClientPublisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	p, err := c.Publisher(ctx, queue)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func pyPublish(t *testing.T, p *artemis.ClientPublisher, urn string, data []byte, trace string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	var opts []artemis.EnvelopeOption
	if trace != "" {
		opts = append(opts, artemis.EnvelopeTraceID(trace))
	}
	id, err := p.Publish(ctx, artemis.Job(urn, json.RawMessage(data), opts...))
	require.NoError(t, err)
	return id
}

// pyTrace is a fresh trace id (a UUID made by the library itself).
func pyTrace(t *testing.T) string {
	t.Helper()
	env, err := artemis.NewEnvelope("urn:babel:interop:trace", map[string]any{})
	require.NoError(t, err)
	return env.TraceID
}

// Scenario 1: Go publishes; the Python consumer routes it by URN and sees the
// data (an integer above 2^53), the trace id, meta.id and attempts 0.
func TestIntegrationPythonConsumesGoPublished(t *testing.T) {
	b, python := pyRequire(t)
	queue := brokertest.Queue(t)
	const urn = "urn:babel:interop:go-to-python"
	data := []byte(`{"order_id":1042,"big":` + pyBigInt + `,"text":"héllo <&> /"}`)
	trace := pyTrace(t)

	c := pyDial(t, b)
	id := pyPublish(t, pyPublisher(t, c, queue), urn, data, trace)

	lines := pyRun(t, b, python, "consume", "--queue", queue, "--urn", urn, "--max", "1", "--idle", "20")
	handled := pyEvents(lines, "handled")
	require.Len(t, handled, 1, "the Python consumer handles the Go message once: %v", lines)
	assert.Equal(t, "ok", handled[0].Outcome)
	assert.Contains(t, string(handled[0].Envelope), `"big":`+pyBigInt, "the big integer reaches Python as its literal")

	env := pyDecodeHandled(t, handled[0])
	assert.Equal(t, urn, env.URN, "routed by URN")
	assert.Equal(t, trace, env.TraceID)
	assert.Equal(t, id, env.Meta.ID)
	assert.Equal(t, 0, env.Attempts)
	assert.Equal(t, artemis.Lang, env.Meta.Lang)
	assert.Equal(t, queue, env.Meta.Queue)
	pyJSONEqual(t, data, env.Data)

	conn := b.Dial(t)
	assert.Empty(t, conn.Drain(queue, ""), "the Python consumer accepted the message")
}

// Scenario 2: Python publishes; the Go consumer routes it, data intact,
// attempts 0. The test says which slot the URN was routed on.
func TestIntegrationPythonPublishedGoConsumes(t *testing.T) {
	b, python := pyRequire(t)
	queue := brokertest.Queue(t)
	const urn = "urn:babel:interop:python-to-go"
	data := `{"order_id":7,"big":` + pyBigInt + `,"text":"héllo <&> /"}`
	trace := pyTrace(t)

	lines := pyRun(t, b, python, "publish", "--queue", queue, "--urn", urn, "--data", data, "--trace", trace)
	published := pyEvents(lines, "published")
	require.Len(t, published, 1)

	c := pyDial(t, b)
	got := make(chan pyDelivery, 4)
	other := make(chan string, 4)
	cons := testkit.MustConsumer(t, artemis.Handlers{
		urn: func(_ context.Context, env *artemis.Envelope, msg *amqp.Message) error {
			got <- pyDelivery{env, msg}
			return nil
		},
		"urn:babel:interop:other": func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			other <- env.Meta.ID
			return nil
		},
	})
	stop := pyConsume(t, c, queue, cons)
	d := pyWait(t, got, "the Go handler")
	stop()

	body := pyBody(t, d.msg)
	slot, routed := pyRoutedOn(d.msg, body)
	t.Logf("Go routed the Python message on %s (%q); wire: %s", slot, routed, pyWire(d.msg))
	assert.Equal(t, urn, routed)
	// Observed Python behaviour: the SDK writes the URN in the x-opt-jms-type
	// annotation only (no properties.subject), so that is what Go routes on.
	assert.Equal(t, "annotation "+artemis.AnnotationJMSType, slot, "observed Python behaviour: routed on the annotation")
	assert.Empty(t, other)
	// Observed Python behaviour: no subject, no message-id, not durable.
	if assert.NotNil(t, d.msg.Properties) {
		assert.Nil(t, d.msg.Properties.Subject, "observed Python behaviour: no properties.subject")
		assert.Nil(t, d.msg.Properties.MessageID, "observed Python behaviour: no properties.message-id")
	}
	assert.False(t, d.msg.Header != nil && d.msg.Header.Durable, "observed Python behaviour: not durable")

	assert.Equal(t, published[0].ID, d.env.Meta.ID)
	assert.Equal(t, trace, d.env.TraceID)
	assert.Equal(t, 0, d.env.Attempts)
	assert.Equal(t, "python", d.env.Meta.Lang)
	assert.Contains(t, string(d.env.Data), `"big":`+pyBigInt)
	pyJSONEqual(t, []byte(data), d.env.Data)
}

// Scenario 3: a Python message failing in Go sees attempts 0, 1, 2, lands on
// <q>.dlq; the Python SDK's redrive moves it back and Go consumes it with
// attempts 0.
func TestIntegrationPythonRedrivesGoDeadLetter(t *testing.T) {
	b, python := pyRequire(t)
	queue := brokertest.Queue(t)
	dlq := queue + ".dlq"
	const urn = "urn:babel:interop:retry"
	data := `{"big":` + pyBigInt + `}`
	trace := pyTrace(t)

	published := pyEvents(pyRun(t, b, python, "publish", "--queue", queue, "--urn", urn, "--data", data, "--trace", trace), "published")
	require.Len(t, published, 1)
	id := published[0].ID

	c := pyDial(t, b)
	attempts := make(chan int, 8)
	failing := testkit.MustConsumer(t, artemis.Handlers{
		urn: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			attempts <- env.Attempts
			return errors.New("go handler fails on purpose")
		},
	}, artemis.WithMaxTries(3), artemis.WithRetryBackoff(artemis.Backoff{Initial: 200 * time.Millisecond, Max: time.Second, Multiplier: 2}))
	stop := pyConsume(t, c, queue, failing) // Consume attaches the <q>.dlq sender and the retry sender
	var seen []int
	for range 3 {
		seen = append(seen, pyWait(t, attempts, "a failing attempt"))
	}
	assert.Equal(t, []int{0, 1, 2}, seen)

	// The DLQ copy: read it, then give it back (a plain release) for the redrive.
	conn := b.Dial(t)
	r := conn.NewReceiver(dlq, nil)
	msg := conn.Receive(r, pyTimeout)
	require.NotNil(t, msg, "a dead-letter copy on %s", dlq)
	stop()
	assert.Empty(t, attempts, "no delivery after the third")
	t.Logf("Go DLQ copy of the Python message, wire: %s", pyWire(msg))
	dead, err := artemis.Decode(pyBody(t, msg))
	require.NoError(t, err)
	require.NotNil(t, dead.DeadLetter)
	assert.Equal(t, artemis.ReasonFailed, dead.DeadLetter.Reason)
	assert.Equal(t, 2, dead.DeadLetter.Attempts)
	assert.Equal(t, 2, dead.Attempts)
	assert.Equal(t, queue, dead.DeadLetter.OriginalQueue)
	assert.Equal(t, artemis.Lang, dead.DeadLetter.Lang)
	assert.Equal(t, id, dead.Meta.ID)
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	require.NoError(t, r.ReleaseMessage(ctx, msg))
	conn.CloseReceiver(r)

	// The Python SDK's redrive: back to dead_letter.original_queue, attempts 0.
	lines := pyRun(t, b, python, "redrive", "--dlq", dlq)
	rd := pyEvents(lines, "redriven")
	require.Len(t, rd, 1)
	assert.Equal(t, 1, rd[0].Redriven, "redrive result: %s", rd[0].raw)
	require.Len(t, rd[0].Items, 1)
	assert.Equal(t, queue, rd[0].Items[0].To)
	assert.Equal(t, id, rd[0].Items[0].MessageID)
	assert.Equal(t, artemis.ReasonFailed, rd[0].Items[0].Reason)

	got := make(chan pyDelivery, 4)
	ok := testkit.MustConsumer(t, artemis.Handlers{
		urn: func(_ context.Context, env *artemis.Envelope, msg *amqp.Message) error {
			got <- pyDelivery{env, msg}
			return nil
		},
	})
	stop = pyConsume(t, c, queue, ok)
	d := pyWait(t, got, "the redriven message")
	stop()
	t.Logf("redriven message wire: %s", pyWire(d.msg))
	assert.Equal(t, 0, d.env.Attempts)
	assert.Nil(t, d.env.DeadLetter)
	assert.Equal(t, id, d.env.Meta.ID)
	assert.Equal(t, trace, d.env.TraceID)
	assert.Equal(t, urn, d.env.URN)
	pyJSONEqual(t, []byte(data), d.env.Data)
	assert.Empty(t, conn.Drain(dlq, ""), "the DLQ is empty after the redrive")
}

// Scenario 4: a Go message failing in the Python consumer lands on Python's
// DLQ, and Go's Decode reads its dead_letter block.
func TestIntegrationPythonDeadLetterDecodedByGo(t *testing.T) {
	b, python := pyRequire(t)
	queue := brokertest.Queue(t)
	dlq := queue + ".dlq"
	const urn = "urn:babel:interop:python-fails"
	data := []byte(`{"big":` + pyBigInt + `,"nested":{"a":[1,2.5,"x"]}}`)
	trace := pyTrace(t)

	c := pyDial(t, b)
	id := pyPublish(t, pyPublisher(t, c, queue), urn, data, trace)

	lines := pyRun(t, b, python, "consume", "--queue", queue, "--urn", urn, "--fail",
		"--max-attempts", "3", "--dead-letter", "--max", "3", "--idle", "20")
	handled := pyEvents(lines, "handled")
	var pyAttempts []int
	for _, l := range handled {
		pyAttempts = append(pyAttempts, pyDecodeHandled(t, l).Attempts)
	}
	// Observed Python behaviour: it retries by re-publishing with attempts+1.
	assert.Equal(t, []int{0, 1, 2}, pyAttempts, "observed Python behaviour: the handler saw these attempts")

	conn := b.Dial(t)
	msgs := conn.Drain(dlq, "")
	require.Len(t, msgs, 1, "one dead-letter record on %s", dlq)
	t.Logf("Python DLQ record wire: %s", pyWire(msgs[0]))
	body := pyBody(t, msgs[0])
	t.Logf("Python DLQ record body: %s", body)

	env, err := artemis.Decode(body)
	require.NoError(t, err, "Go decodes the Python DLQ record")
	require.NoError(t, env.Validate(), "the Python DLQ record is a valid envelope for Go")
	require.NotNil(t, env.DeadLetter, "Go reads the dead_letter block")
	dl := env.DeadLetter
	assert.Equal(t, artemis.ReasonFailed, dl.Reason)
	require.NotNil(t, dl.Error)
	assert.Contains(t, *dl.Error, "python handler failed on purpose")
	require.NotNil(t, dl.Exception)
	assert.Equal(t, "InteropFailure", *dl.Exception, "observed Python behaviour: the Python class name")
	assert.Equal(t, "python", dl.Lang)
	assert.Equal(t, queue, dl.OriginalQueue)
	assert.Positive(t, dl.FailedAt)
	// Observed Python behaviour: one more than the last failed delivery's
	// attempts (Go, Java and Node write 2 here), in the block and the envelope.
	assert.Equal(t, 3, dl.Attempts, "observed Python behaviour: dead_letter.attempts")
	assert.Equal(t, 3, env.Attempts, "observed Python behaviour: attempts")

	assert.Equal(t, urn, env.URN)
	assert.Equal(t, id, env.Meta.ID)
	assert.Equal(t, trace, env.TraceID)
	assert.Equal(t, artemis.Lang, env.Meta.Lang, "meta is kept: the Go producer")
	pyJSONEqual(t, data, env.Data)
	assert.Contains(t, string(env.Data), pyBigInt)
	assert.Empty(t, conn.Drain(queue, ""), "nothing is left on the source queue")
}

// Scenario 5: 200 messages, half published from each side, consumed by one Go
// and one Python consumer at once on one queue, are each handled exactly once.
func TestIntegrationPythonSharedQueueExactlyOnce(t *testing.T) {
	b, python := pyRequire(t)
	queue := brokertest.Queue(t)
	const urn = "urn:babel:interop:shared"
	const perSide = 100

	py := pyStart(t, b, python, "consume", "--queue", queue, "--urn", urn)
	py.until("ready")

	var mu sync.Mutex
	handled := map[string][]string{} // meta.id -> who handled it
	total := make(chan struct{}, 2*perSide+64)
	record := func(id, who string) {
		mu.Lock()
		handled[id] = append(handled[id], who)
		mu.Unlock()
		total <- struct{}{}
	}

	c := pyDial(t, b)
	cons := testkit.MustConsumer(t, artemis.Handlers{
		urn: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			record(env.Meta.ID, "go")
			return nil
		},
	})
	stopGo := pyConsume(t, c, queue, cons)

	// Python's handled lines arrive on the peer's stdout while it runs.
	pyDone := make(chan []pyLine, 1)
	go func() {
		var rest []pyLine
		for l := range py.lines {
			rest = append(rest, l)
			if l.Event == "handled" && l.Outcome == "ok" {
				var e struct {
					Meta struct {
						ID string `json:"id"`
					} `json:"meta"`
				}
				if json.Unmarshal(l.Envelope, &e) == nil {
					record(e.Meta.ID, "python")
				}
			}
		}
		pyDone <- rest
	}()

	// Publish from both sides at once.
	published := make(map[string]string, 2*perSide)
	var pubMu sync.Mutex
	goPub := pyPublisher(t, c, queue)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range perSide {
			ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
			id, err := goPub.Publish(ctx, artemis.Job(urn, map[string]any{"seq": i, "from": "go"}))
			cancel()
			if !assert.NoError(t, err) {
				return
			}
			pubMu.Lock()
			published[id] = "go"
			pubMu.Unlock()
		}
	}()
	start := time.Now()
	pyPub := pyRun(t, b, python, "publish", "--queue", queue, "--urn", urn, "--data", `{"from":"python"}`,
		"--count", fmt.Sprint(perSide), "--seq-key", "seq")
	wg.Wait()
	for _, l := range pyEvents(pyPub, "published") {
		published[l.ID] = "python"
	}
	require.Len(t, published, 2*perSide, "200 distinct meta.ids published")

	deadline := time.After(pyTimeout)
	for n := 0; n < 2*perSide; n++ {
		select {
		case <-total:
		case <-deadline:
			mu.Lock()
			t.Fatalf("only %d of %d messages handled after %s", len(handled), 2*perSide, pyTimeout)
			mu.Unlock()
		}
	}
	elapsed := time.Since(start)
	// Any duplicate would come after the 200th handling: give it a moment.
	select {
	case <-total:
		t.Errorf("a handling beyond the %d messages", 2*perSide)
	case <-time.After(2 * time.Second):
	}
	_ = py.stdin.Close()
	rest := pyWait(t, pyDone, "the Python consumer to stop")
	if err := <-py.done; err != nil {
		t.Fatalf("python consumer exited: %v\n%s", err, py.redact(py.stderr.String()))
	}
	stopGo()
	for _, l := range rest {
		if l.Event == "error" || l.Event == "unparsed" || (l.Event == "handled" && l.Outcome != "ok") {
			t.Errorf("peer: %s", py.redact(l.raw))
		}
	}

	mu.Lock()
	defer mu.Unlock()
	byConsumer := map[string]int{}
	bySource := map[string]map[string]int{"go": {}, "python": {}}
	for id, who := range handled {
		src, ok := published[id]
		assert.True(t, ok, "handled an id nobody published: %s", id)
		assert.Len(t, who, 1, "message %s handled %d times (%v)", id, len(who), who)
		for _, w := range who {
			byConsumer[w]++
			if ok {
				bySource[src][w]++
			}
		}
	}
	for id := range published {
		assert.Contains(t, handled, id, "message %s never handled", id)
	}
	t.Logf("%d messages handled in %s: by consumer %v; published by go -> handled by %v, by python -> %v",
		len(handled), elapsed.Round(time.Millisecond), byConsumer, bySource["go"], bySource["python"])
	assert.Positive(t, byConsumer["go"], "the Go consumer handled some")
	assert.Positive(t, byConsumer["python"], "the Python consumer handled some")
	assert.Empty(t, b.Dial(t).Drain(queue, ""), "nothing left on the queue")
}

// Scenario 6: a Go consumer fails a Go message once; its retry waits on the
// broker as a scheduled copy with attempts 1, and a Python consumer on the
// same queue handles that copy when it is due, with attempts 1: a scheduled
// retry is an ordinary BabelQueue message to the Python SDK.
func TestIntegrationPythonHandlesAGoScheduledRetry(t *testing.T) {
	b, python := pyRequire(t)
	queue := brokertest.Queue(t)
	const urn, wait = "urn:babel:interop:retry-scheduled", 3 * time.Second
	data := []byte(`{"order_id":7,"big":` + pyBigInt + `}`)
	trace := pyTrace(t)

	c := pyDial(t, b)
	id := pyPublish(t, pyPublisher(t, c, queue), urn, data, trace)
	failed := make(chan time.Time, 4)
	cons := testkit.MustConsumer(t, artemis.Handlers{
		urn: func(context.Context, *artemis.Envelope, *amqp.Message) error {
			failed <- time.Now()
			return errors.New("go handler fails on purpose")
		},
	}, artemis.WithRetrySchedule(func(int) time.Duration { return wait }))
	stop := pyConsume(t, c, queue, cons)
	failedAt := pyWait(t, failed, "the Go attempt")
	stop() // Consume returns once the failed delivery is settled: the copy is on the broker
	assert.Empty(t, failed, "one Go attempt")

	lines := pyRun(t, b, python, "consume", "--queue", queue, "--urn", urn, "--max", "1", "--idle", "20")
	handledAt := time.Now()
	handled := pyEvents(lines, "handled")
	require.Len(t, handled, 1, "the Python consumer handles the scheduled copy once: %v", lines)
	assert.Equal(t, "ok", handled[0].Outcome)
	env := pyDecodeHandled(t, handled[0])
	t.Logf("python interop: a Go scheduled retry (%v) handled by Python %.1f s after the Go failure: attempts %d, same meta.id %t, same trace %t",
		wait, handledAt.Sub(failedAt).Seconds(), env.Attempts, env.Meta.ID == id, env.TraceID == trace)
	assert.Equal(t, 1, env.Attempts, "the copy's body count")
	assert.Equal(t, id, env.Meta.ID)
	assert.Equal(t, trace, env.TraceID)
	assert.Equal(t, urn, env.URN)
	pyJSONEqual(t, data, env.Data)
	assert.GreaterOrEqual(t, handledAt.Sub(failedAt), wait, "handled no earlier than its time")

	conn := b.Dial(t)
	assert.Empty(t, conn.Drain(queue, ""), "the Python consumer accepted the copy")
	assert.Empty(t, conn.Drain(queue+".dlq", ""), "nothing dead-lettered")
}
