package integration_test

// A Node subscriber on a Go topic: plain rhea (the AMQP 1.0 library the
// BabelQueue Node SDK is built on), testdata/interop/rhea_peer.js, attached
// as a Node service attaches: a receiver on the subscription's full name,
// topic::subscription, with the "topic" source capability, accepting each
// delivery. rhea is installed by `scripts/node-peer setup`.
//
// These tests run when ARTEMIS_URL is set and BQ_RHEA_PEER names the folder
// that setup installed rhea into (scripts/interop sets both).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// rheaEnvPeer names the folder scripts/node-peer installed rhea into.
const rheaEnvPeer = "BQ_RHEA_PEER"

// rheaTimeout bounds one peer process and every wait on it.
const rheaTimeout = 90 * time.Second

// rheaRequire returns the broker, node and the peer's folder, or skips the
// test.
func rheaRequire(t *testing.T) (b *brokertest.Broker, node, dir string) {
	t.Helper()
	b = brokertest.Require(t)
	dir = os.Getenv(rheaEnvPeer)
	if dir == "" {
		t.Skip("rhea interop skipped: " + rheaEnvPeer + " is not set; run scripts/interop " +
			"(it installs rhea with scripts/node-peer setup and sets " + rheaEnvPeer + ")")
	}
	node, err := exec.LookPath("node")
	require.NoError(t, err, "%s is set but node is not on PATH", rheaEnvPeer)
	_, err = os.Stat(filepath.Join(dir, "node_modules", "rhea", "package.json"))
	require.NoError(t, err, "%s=%s holds no rhea: run scripts/node-peer setup", rheaEnvPeer, dir)
	return b, node, dir
}

// rheaLine is one JSON line of the peer.
type rheaLine struct {
	Event              string         `json:"event"`
	RemoteAddress      string         `json:"remote_address"`
	RemoteCapabilities []string       `json:"remote_capabilities"`
	Rhea               string         `json:"rhea"`
	Body               string         `json:"body"`
	BodyType           string         `json:"body_type"`
	MessageID          any            `json:"message_id"`
	CorrelationID      any            `json:"correlation_id"`
	Subject            any            `json:"subject"`
	JMSType            any            `json:"jms_type"`
	ContentType        any            `json:"content_type"`
	Durable            bool           `json:"durable"`
	DeliveryCount      int            `json:"delivery_count"`
	AppProperties      map[string]any `json:"application_properties"`
	Annotations        map[string]any `json:"message_annotations"`
	Received           int            `json:"received"`
	Reason             string         `json:"reason"`
	Message            string         `json:"message"`
	raw                string
}

// rheaProc is one running peer.
type rheaProc struct {
	t      *testing.T
	stdin  interface{ Close() error }
	lines  chan rheaLine
	stderr *pySyncWriter
	secret string
	done   chan error
}

// rheaStart runs rhea_peer.js with args against b. The process is killed
// when the test ends.
func rheaStart(t *testing.T, b *brokertest.Broker, node, dir string, args ...string) *rheaProc {
	t.Helper()
	peer, err := filepath.Abs(filepath.Join("..", "testdata", "interop", "rhea_peer.js"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), rheaTimeout+30*time.Second)
	cmd := exec.CommandContext(ctx, node, append([]string{peer}, append(args, "--timeout", fmt.Sprint(rheaTimeout.Seconds()))...)...)
	cmd.WaitDelay = 5 * time.Second
	// The credentials go in the environment, never on the command line.
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"),
		brokertest.EnvURL+"="+b.URL, brokertest.EnvUser+"="+b.User, brokertest.EnvPassword+"="+b.Password)
	p := &rheaProc{t: t, stderr: &pySyncWriter{buf: &bytes.Buffer{}}, secret: b.Password}
	cmd.Stderr = p.stderr
	p.stdin, p.lines, p.done = startLinePeer(t, cmd, func(text string) rheaLine {
		var l rheaLine
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			l = rheaLine{Event: "unparsed", Message: err.Error()}
		}
		l.raw = text
		return l
	})
	t.Cleanup(func() {
		cancel()
		if t.Failed() {
			t.Logf("rhea peer %s stderr:\n%s", strings.Join(args, " "), p.redact(p.stderrText()))
		}
	})
	return p
}

func (p *rheaProc) stderrText() string {
	p.stderr.mu.Lock()
	defer p.stderr.mu.Unlock()
	return p.stderr.buf.String()
}

func (p *rheaProc) redact(s string) string { return maskSecret(s, p.secret) }

// line checks one line read from p.lines: an error line, an unparsable
// one or the end of the output fails the test.
func (p *rheaProc) line(l rheaLine, ok bool) rheaLine {
	p.t.Helper()
	if !ok {
		p.t.Fatalf("the rhea peer ended early: %v\nstderr:\n%s", <-p.done, p.redact(p.stderrText()))
	}
	if l.Event == "error" || l.Event == "unparsed" {
		p.t.Fatalf("rhea peer: %s", p.redact(l.raw))
	}
	return l
}

// next returns the peer's next line, within rheaTimeout.
func (p *rheaProc) next() rheaLine {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		return p.line(l, ok)
	case <-time.After(rheaTimeout):
		p.t.Fatalf("no line from the rhea peer in %s", rheaTimeout)
		return rheaLine{}
	}
}

// ready waits for the peer's ready line and checks the attach the broker
// answered: the address asked for, with the "topic" capability.
func (p *rheaProc) ready(source string) rheaLine {
	p.t.Helper()
	l := p.next()
	require.Equal(p.t, "ready", l.Event, l.raw)
	assert.Equal(p.t, source, l.RemoteAddress, "the broker's source address")
	assert.Contains(p.t, l.RemoteCapabilities, "topic", "the broker's source capabilities")
	return l
}

// untilDone reads lines up to the done line (the peer stops by itself:
// --max or --idle) and returns the messages; the exit status must be 0.
func (p *rheaProc) untilDone() (msgs []rheaLine, done rheaLine) {
	p.t.Helper()
	for {
		l := p.next()
		switch l.Event {
		case "message":
			msgs = append(msgs, l)
		case "done":
			if err := <-p.done; err != nil {
				p.t.Fatalf("rhea peer exited: %v\nstderr:\n%s", err, p.redact(p.stderrText()))
			}
			return msgs, l
		default:
			p.t.Fatalf("rhea peer: unexpected line %s", l.raw)
		}
	}
}

// stop closes the peer's stdin (it detaches then) and returns the messages
// it printed before its done line.
func (p *rheaProc) stop() (msgs []rheaLine, done rheaLine) {
	p.t.Helper()
	_ = p.stdin.Close()
	return p.untilDone()
}

// rheaQueueNamed is the broker's queue named name (its DLQ, name.dlq,
// left out), as the one-element list the checks read.
func rheaQueueNamed(t *testing.T, b *brokertest.Broker, name string) []brokerQueue {
	t.Helper()
	var qs []brokerQueue
	for _, q := range queuesNamed(t, b, name) {
		if q.Name == name {
			qs = append(qs, q)
		}
	}
	require.Len(t, qs, 1, "one queue named %s", name)
	return qs
}

// rheaPublished is what a Go publish sent: the envelope's id, and the
// message the library projects it onto (artemis.NewMessage with the same
// options), which the rhea subscriber must receive unchanged.
type rheaPublished struct {
	env  *artemis.Envelope
	want *amqp.Message
}

// rheaPublish publishes n events to pub, each with a trace id of its own
// and every other one with headers, and returns them by meta.id.
func rheaPublish(t *testing.T, pub *artemis.ClientPublisher, topic string, from, n int) map[string]rheaPublished {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	out := make(map[string]rheaPublished, n)
	for i := from; i < from+n; i++ {
		env, err := artemis.NewEnvelope(urnOrderCreated, map[string]any{"n": i, "big": 9007199254740993, "note": "é ✓"},
			artemis.EnvelopeTraceID(pyTrace(t)), artemis.EnvelopeQueue(topic))
		require.NoError(t, err)
		var opts []artemis.PublishOption
		if i%2 == 0 {
			opts = append(opts, artemis.WithHeaders(map[string]string{
				"traceparent": fmt.Sprintf("00-0af7651916cd43dd8448eb211c8031%02x-b7ad6b7169203331-01", i%256),
				"region":      "eu",
			}))
		}
		want, err := artemis.NewMessage(env, opts...)
		require.NoError(t, err)
		id, err := pub.Publish(ctx, env, opts...)
		require.NoError(t, err)
		require.Equal(t, env.Meta.ID, id)
		out[id] = rheaPublished{env: env, want: want}
	}
	return out
}

// rheaCheck checks one message rhea received against what Go published:
// the body byte for byte, message-id, correlation-id, subject, the
// x-opt-jms-type annotation and the application properties as the
// library projected them, and the body decoded by the library's Decode.
// It returns meta.id.
func rheaCheck(t *testing.T, topic string, published map[string]rheaPublished, l rheaLine) string {
	t.Helper()
	require.Equal(t, "message", l.Event)
	env, err := artemis.Decode([]byte(l.Body))
	require.NoError(t, err, "the body rhea received is an envelope: %s", l.Body)
	p, ok := published[env.Meta.ID]
	require.True(t, ok, "rhea received an event nobody published: %s", l.Body)
	want := p.want
	assert.Equal(t, "amqp-value string", l.BodyType, "one AMQP value string, as Go sent it")
	assert.Equal(t, string(pyBody(t, want)), l.Body, "the envelope byte for byte")
	assert.Contains(t, l.Body, `"big":9007199254740993`)
	assert.Equal(t, want.Properties.MessageID, l.MessageID, "message-id is meta.id")
	assert.Equal(t, env.Meta.ID, l.MessageID)
	assert.Equal(t, want.Properties.CorrelationID, l.CorrelationID, "correlation-id is the trace id")
	assert.Equal(t, p.env.TraceID, l.CorrelationID)
	assert.Equal(t, *want.Properties.Subject, l.Subject, "subject is the URN")
	assert.Equal(t, want.Annotations[artemis.AnnotationJMSType], l.JMSType, "x-opt-jms-type is the URN")
	assert.Equal(t, *want.Properties.ContentType, l.ContentType)
	assert.True(t, l.Durable, "durable")
	assert.Zero(t, l.DeliveryCount, "a first delivery")
	wantProps := map[string]any{}
	for k, v := range want.ApplicationProperties {
		wantProps[k] = v
	}
	assert.Equal(t, wantProps, l.AppProperties, "the application properties: bq_ and headers, nothing else")
	assert.Equal(t, "go", l.AppProperties[artemis.PropSourceLang])
	assert.Equal(t, urnOrderCreated, env.URN)
	assert.Equal(t, topic, env.Meta.Queue)
	assert.Equal(t, p.env.TraceID, env.TraceID)
	assert.Equal(t, artemis.Lang, env.Meta.Lang)
	return env.Meta.ID
}

// A rhea subscriber and a Go Subscribe on one subscription share its queue:
// each event is handled once, by one of them, and what rhea receives is
// the message the library published, unchanged.
func TestIntegrationRheaSubscriberSharesAGoSubscription(t *testing.T) {
	b, node, dir := rheaRequire(t)
	topic := brokertest.Queue(t)
	sub := topic + ".billing"
	const events = 40

	ta := newTally()
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("go", nil)})
	require.NoError(t, err)
	subscribe(t, b.URL, topic, sub, cons)
	rh := rheaStart(t, b, node, dir, "subscribe", "--source", topic+"::"+sub, "--capability", "topic", "--credit", "5")
	ready := rh.ready(topic + "::" + sub)

	// One queue, the Go one, with both consumers on it.
	shared := "unchecked (no Artemis CLI)"
	if b.HasCLI() {
		qs := rheaQueueNamed(t, b, sub)
		assert.Equal(t, sub, qs[0].Name)
		assert.Equal(t, topic, qs[0].Address)
		assert.Equal(t, "MULTICAST", qs[0].RoutingType)
		assert.Equal(t, "true", qs[0].Durable)
		assert.Equal(t, "2", qs[0].ConsumerCount, "the Go and the rhea subscriber on one queue")
		shared = fmt.Sprintf("queue %s on %s, %s, durable %s, %s consumers", qs[0].Name, qs[0].Address, qs[0].RoutingType, qs[0].Durable, qs[0].ConsumerCount)
	}

	pub := topicPublisher(t, b.URL, topic)
	published := rheaPublish(t, pub, topic, 0, events)

	var got []rheaLine
	deadline := time.After(arrival)
	for len(got)+ta.count("go") < events {
		select {
		case l, ok := <-rh.lines:
			l = rh.line(l, ok)
			require.Equal(t, "message", l.Event, l.raw)
			got = append(got, l)
		case <-ta.ch:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatalf("rhea received %d and Go handled %d of %d events", len(got), ta.count("go"), events)
		}
	}
	time.Sleep(quiet) // a copy handled twice would show up now
	more, done := rh.stop()
	got = append(got, more...)
	assert.Equal(t, "stdin", done.Reason)
	assert.Equal(t, len(got), done.Received, "every message rhea printed, it accepted")

	seen := map[string]int{}
	for _, l := range got {
		seen[rheaCheck(t, topic, published, l)]++
	}
	ta.mu.Lock()
	for id, n := range ta.seen["go"] {
		seen[id] += n
	}
	ta.mu.Unlock()
	assert.Len(t, seen, events, "every event, none lost")
	for id, n := range seen {
		_, ok := published[id]
		assert.True(t, ok, "published: %s", id)
		assert.Equal(t, 1, n, "once across rhea and Go: %s", id)
	}
	assert.NotZero(t, len(got), "the rhea subscriber got its share")
	assert.NotZero(t, ta.count("go"), "the Go subscriber got its share")
	assert.Equal(t, events, len(got)+ta.count("go"), "handled once each, in all")
	t.Logf("rhea %s on %s::%s (capability topic; the broker answered %v) and a Go Subscribe on the same subscription: %d events from a Go TopicPublisher, rhea %d, Go %d, none twice, none lost; %s; body, message-id, correlation-id, subject, x-opt-jms-type and application properties as the library projected them",
		ready.Rhea, topic, sub, ready.RemoteCapabilities, events, len(got), ta.count("go"), shared)
}

// A rhea subscriber makes its subscription itself (on an address nobody
// made yet), the queue outlives it, and it then gets every event a Go
// TopicPublisher published while it was gone, as another subscription of
// the topic (a Go one) does too.
func TestIntegrationRheaSubscriptionOfItsOwnGetsEveryEvent(t *testing.T) {
	b, node, dir := rheaRequire(t)
	topic := brokertest.Queue(t)
	audit, billing := topic+".audit", topic+".billing"
	const events = 20

	first := rheaStart(t, b, node, dir, "subscribe", "--source", topic+"::"+audit, "--capability", "topic")
	first.ready(topic + "::" + audit)
	none, done := first.stop()
	assert.Empty(t, none, "nothing was published yet")
	assert.Zero(t, done.Received)

	made := "unchecked (no Artemis CLI)"
	if b.HasCLI() {
		qs := rheaQueueNamed(t, b, audit)
		assert.Equal(t, audit, qs[0].Name)
		assert.Equal(t, topic, qs[0].Address)
		assert.Equal(t, "MULTICAST", qs[0].RoutingType, "a subscription queue of the topic")
		assert.Equal(t, "true", qs[0].Durable, "durable, though rhea asked for no terminus durability")
		assert.Equal(t, "0", qs[0].ConsumerCount, "it outlived its subscriber")
		ctx, cancel := context.WithTimeout(context.Background(), brokertest.CLITimeout)
		defer cancel()
		addr, err := b.CLI(ctx, "address show", "--name", topic)
		require.NoError(t, err)
		assert.Contains(t, addr, "routingTypes={MULTICAST}", "rhea's attach made the address a topic")
		made = fmt.Sprintf("address multicast; queue %s on %s, %s, durable %s, %s consumers after rhea left", qs[0].Name, qs[0].Address, qs[0].RoutingType, qs[0].Durable, qs[0].ConsumerCount)
	}

	ta := newTally()
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("billing", nil)})
	require.NoError(t, err)
	subscribe(t, b.URL, topic, billing, cons)
	pub := topicPublisher(t, b.URL, topic)
	published := rheaPublish(t, pub, topic, 0, events)

	second := rheaStart(t, b, node, dir, "subscribe", "--source", topic+"::"+audit, "--capability", "topic",
		"--max", fmt.Sprint(events))
	second.ready(topic + "::" + audit)
	got, done := second.untilDone()
	assert.Equal(t, "max", done.Reason)
	seen := map[string]int{}
	for _, l := range got {
		seen[rheaCheck(t, topic, published, l)]++
	}
	assert.Len(t, seen, events, "the rhea subscription got every event")
	for id, n := range seen {
		assert.Equal(t, 1, n, "once: %s", id)
	}

	ta.await(t, "billing", events, arrival)
	time.Sleep(quiet)
	assert.Equal(t, events, ta.count("billing"), "the Go subscription got each event too, once")
	if b.HasCLI() {
		qs := rheaQueueNamed(t, b, audit)
		assert.Equal(t, "0", qs[0].MessageCount, "rhea accepted every event it got")
	}
	t.Logf("rhea subscription %s::%s made by rhea's own attach (%s): %d events published while no rhea ran, rhea got %d (distinct %d, none twice), the Go subscription %s %d",
		topic, audit, made, events, len(got), len(seen), billing, ta.count("billing"))
}
