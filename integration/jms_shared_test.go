package integration_test

// A Go topic publish reaches JMS *shared durable* subscribers (the Artemis
// core JMS client, testdata/interop/JmsTopicPeer.java, run from the
// broker's own jars), and their subscription is the same queue a Go
// Subscribe of that name consumes.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// jmsLine is one JSON line of the Java peer.
type jmsLine struct {
	Event       string            `json:"event"`
	Type        string            `json:"type"`
	Correlation string            `json:"correlation"`
	Text        string            `json:"text"`
	Properties  map[string]string `json:"properties"`
	Received    int               `json:"received"`
	Message     string            `json:"message"`
}

// jmsPeer is one running JmsTopicPeer.
type jmsPeer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan jmsLine
	stderr *strings.Builder
	mu     *sync.Mutex
	done   chan error
}

// startJMSSharedSubscriber runs the Java peer as a shared durable subscriber
// of topic's subscription sub and waits until its consumer exists. It is
// stopped (stdin closed, then killed) when the test ends.
func startJMSSharedSubscriber(t *testing.T, b *brokertest.Broker, topic, sub string) *jmsPeer {
	t.Helper()
	java, err := exec.LookPath("java")
	require.NoError(t, err, "the JMS peer needs java (the broker's own JVM)")
	src, err := filepath.Abs(filepath.Join("..", "testdata", "interop", "JmsTopicPeer.java"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*brokertest.CLITimeout)
	cmd := exec.CommandContext(ctx, java, "-cp", filepath.Join(b.Home, "lib", "*"), src,
		"shared-durable", b.CoreURL, b.User, b.Password, topic, sub)
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &jmsPeer{cmd: cmd, stdin: stdin, lines: make(chan jmsLine, 4096), stderr: &strings.Builder{}, mu: &sync.Mutex{}, done: make(chan error, 1)}
	cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.stderr.Write(b)
	})
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
		for sc.Scan() {
			var l jmsLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				p.lines <- l
			}
		}
		close(p.lines)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		cancel()
	})
	l := p.next(t)
	require.Equal(t, "ready", l.Event, "the JMS peer: %+v (stderr: %s)", l, p.errText(b.Password))
	return p
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// errText is the peer's stderr, the password masked.
func (p *jmsPeer) errText(secret string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maskSecret(p.stderr.String(), secret)
}

// next is the peer's next line; an error line or the end of its output
// fails the test.
func (p *jmsPeer) next(t *testing.T) jmsLine {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		require.True(t, ok, "the JMS peer ended")
		require.NotEqual(t, "error", l.Event, "the JMS peer failed: %s", l.Message)
		return l
	case <-time.After(2 * brokertest.CLITimeout):
		t.Fatal("the JMS peer said nothing")
		return jmsLine{}
	}
}

// stop closes the peer's stdin and returns what it received after the
// lines already read, once it printed "done".
func (p *jmsPeer) stop(t *testing.T) []jmsLine {
	t.Helper()
	require.NoError(t, p.stdin.Close())
	var got []jmsLine
	for {
		l := p.next(t)
		if l.Event == "done" {
			return got
		}
		got = append(got, l)
	}
}

func TestIntegrationGoTopicPublishReachesJMSSharedDurableSubscribers(t *testing.T) {
	b := brokertest.Require(t)
	b.RequireCLI(t)
	if b.Home == "" {
		t.Skip("JMS shared subscriber test skipped: it runs the Artemis JMS client from ARTEMIS_HOME/lib (scripts/artemis env prints it)")
	}
	topic := brokertest.Queue(t)
	// No dot in the name: the core JMS client escapes a dot in a
	// subscription name (a.b becomes the queue a\.b), docs/pubsub.md.
	sub := strings.ReplaceAll(topic, ".", "_") + "_jms"
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	a := startJMSSharedSubscriber(t, b, topic, sub)
	bb := startJMSSharedSubscriber(t, b, topic, sub)

	// The JMS shared durable subscription without a client id is the queue
	// sub on topic: the one a Go Subscribe(topic, sub) consumes.
	qs := queuesNamed(t, b, sub)
	require.Len(t, qs, 1, "%+v", qs)
	assert.Equal(t, sub, qs[0].Name)
	assert.Equal(t, topic, qs[0].Address)
	assert.Equal(t, "MULTICAST", qs[0].RoutingType)
	assert.Equal(t, "true", qs[0].Durable)
	assert.Equal(t, "2", qs[0].ConsumerCount, "both JMS subscribers share it")

	pub := topicPublisher(t, b.URL, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const events = 20
	published := map[string]bool{}
	for i := range events {
		id, err := pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": i}),
			artemis.WithHeaders(map[string]string{"traceparent": traceparent, "region": "eu"}))
		require.NoError(t, err)
		published[id] = true
	}

	// Read both peers' lines until every event arrived, then stop them.
	received := map[string]int{}
	per := []int{0, 0}
	check := func(l jmsLine) {
		require.Equal(t, "received", l.Event)
		assert.Equal(t, urnOrderCreated, l.Type, "the URN as JMSType")
		assert.Equal(t, "go", l.Properties["bq_source_lang"])
		assert.Equal(t, "1", l.Properties["bq_schema_version"])
		assert.Equal(t, traceparent, l.Properties["traceparent"], "the headers as JMS properties")
		assert.Equal(t, "eu", l.Properties["region"])
		env, err := artemis.Decode([]byte(l.Text))
		require.NoError(t, err, "the JMS text is the envelope")
		assert.Equal(t, urnOrderCreated, env.URN)
		assert.Equal(t, topic, env.Meta.Queue)
		assert.Equal(t, env.TraceID, l.Correlation, "JMSCorrelationID is the trace id")
		received[env.Meta.ID]++
	}
	total := 0
	deadline := time.After(arrival)
	for total < events {
		select {
		case l, ok := <-a.lines:
			require.True(t, ok, "JMS peer a ended: %s", a.errText(b.Password))
			check(l)
			per[0]++
		case l, ok := <-bb.lines:
			require.True(t, ok, "JMS peer b ended: %s", bb.errText(b.Password))
			check(l)
			per[1]++
		case <-deadline:
			t.Fatalf("the JMS subscribers received %d of %d", total, events)
		}
		total = per[0] + per[1]
	}
	for i, p := range []*jmsPeer{a, bb} {
		for _, l := range p.stop(t) {
			check(l)
			per[i]++
		}
	}
	assert.Len(t, received, events, "every event")
	for id, n := range received {
		assert.True(t, published[id], "published: %s", id)
		assert.Equal(t, 1, n, "once across the two subscribers: %s", id)
	}

	// Both gone, the durable subscription keeps what is published; a Go
	// Subscribe under the same name consumes that same queue.
	const whileDown = 10
	for i := range whileDown {
		_, err := pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": events + i}))
		require.NoError(t, err)
	}
	ta := newTally()
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("go", nil)})
	require.NoError(t, err)
	subscribe(t, b.URL, topic, sub, cons)
	ta.await(t, "go", whileDown, arrival)
	time.Sleep(quiet)
	assert.Equal(t, whileDown, ta.count("go"), "what the JMS subscription kept, once")
	t.Logf("JMS shared durable subscription %s (queue %s, durable): %d events from a Go TopicPublisher, subscribers %d + %d, none twice, JMSType, bq_ properties and headers as JMS properties; %d published while both were gone, handled by a Go Subscribe on the same name",
		sub, qs[0].Name, events, per[0], per[1], whileDown)
}
