package main

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

func TestFixturesPadTheEnvelopeToSize(t *testing.T) {
	for _, size := range []int{1024, 4096} {
		data, msgs, n, err := fixtures(size, 3)
		require.NoError(t, err)
		require.Len(t, msgs, 3)
		assert.Equal(t, size, n, "encoded envelope size")
		// The library publishes the same data with other order ids of the
		// same width: its envelopes are the same size.
		data.OrderID = 100000 + 19999
		env, err := artemis.NewEnvelope(urn, data, artemis.EnvelopeQueue("bench"))
		require.NoError(t, err)
		body, err := env.Encode()
		require.NoError(t, err)
		assert.Len(t, body, size)
		ids := map[any]bool{}
		for _, m := range msgs {
			assert.True(t, m.Header.Durable)
			ids[m.Properties.MessageID] = true
		}
		assert.Len(t, ids, 3, "each prebuilt message has its own meta.id")
	}
}

// -raw-json sends what the library sends, built by hand.
func TestBuildRawMatchesTheLibrarysMessage(t *testing.T) {
	data, msgs, _, err := fixtures(1024, 1)
	require.NoError(t, err)
	lib := msgs[0]
	raw, err := buildRaw(data, "bench")
	require.NoError(t, err)

	assert.Equal(t, lib.Header, raw.Header)
	assert.Equal(t, lib.Annotations, raw.Annotations)
	assert.Equal(t, lib.ApplicationProperties, raw.ApplicationProperties)
	assert.Equal(t, *lib.Properties.ContentType, *raw.Properties.ContentType)
	assert.Equal(t, *lib.Properties.Subject, *raw.Properties.Subject)
	assert.IsType(t, "", raw.Properties.MessageID)
	assert.IsType(t, "", raw.Properties.CorrelationID)

	body, ok := raw.Value.(string)
	require.True(t, ok, "an AMQP value string body, like the library's")
	env, err := artemis.Decode([]byte(body))
	require.NoError(t, err)
	require.NoError(t, env.Validate(), "the hand-built body is a valid envelope")
	assert.Equal(t, urn, env.URN)
	assert.Equal(t, raw.Properties.MessageID, env.Meta.ID)
	assert.Equal(t, raw.Properties.CorrelationID, env.TraceID)
	libBody, _ := lib.Value.(string)
	assert.InDelta(t, len(libBody), len(body), 8, "the same body size")
}

func TestSplitSharesOutEveryMessage(t *testing.T) {
	for _, tc := range []struct{ n, c int }{{20000, 1}, {20000, 8}, {2000, 3}, {5, 8}} {
		sum := 0
		for i := range tc.c {
			s := split(tc.n, tc.c, i)
			assert.GreaterOrEqual(t, s, tc.n/tc.c)
			assert.LessOrEqual(t, s, tc.n/tc.c+1)
			sum += s
		}
		assert.Equal(t, tc.n, sum, "n=%d c=%d", tc.n, tc.c)
	}
}

func TestMedian(t *testing.T) {
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	in := []float64{3, 1, 2}
	median(in)
	assert.Equal(t, []float64{3, 1, 2}, in, "the input is not reordered")
	rs := []result{{n: 100, wall: 1e9}, {n: 300, wall: 1e9}, {n: 200, wall: 1e9}}
	assert.Equal(t, 200.0, medianOf(rs, func(r result) float64 { return r.rate() }))
}

func TestPercentile(t *testing.T) {
	var l []time.Duration
	for i := 1; i <= 1000; i++ {
		l = append(l, time.Duration(1001-i)*time.Millisecond)
	}
	assert.Equal(t, 500*time.Millisecond, percentile(l, 0.5))
	assert.Equal(t, 990*time.Millisecond, percentile(l, 0.99))
	assert.Equal(t, 999*time.Millisecond, percentile(l, 0.999))
	assert.Equal(t, time.Duration(0), percentile(nil, 0.5))
	assert.Equal(t, 1000*time.Millisecond, l[0], "the input is not reordered")
}

// An empty list leaves its scenarios out; the grouped scenario then takes
// the raw side's default credit.
func TestScenariosOfEmptyLists(t *testing.T) {
	for _, in := range []string{"", " "} {
		got, err := parseInts(in)
		require.NoError(t, err)
		assert.Empty(t, got)
	}
	_, err := parseInts("8,")
	assert.Error(t, err, "an empty item in a list")
	r := &runner{cfg: &config{windows: []int{256}, groups: 64, groupConc: 8}}
	var names []string
	for _, s := range r.scenarios() {
		names = append(names, s.name())
	}
	assert.Equal(t, []string{"pipelined w=256", "grouped c=8 cr=100"}, names)
}

func TestScenariosCoverEveryConfiguredCase(t *testing.T) {
	r := &runner{cfg: &config{conc: []int{1, 8, 32}, windows: []int{64, 256}, consConc: []int{1, 8},
		credits: []int{100, 1000}, clientConc: 8, groups: 64, groupConc: 8}}
	var names []string
	for _, s := range r.scenarios() {
		names = append(names, s.name())
	}
	assert.Equal(t, []string{
		"publish c=1", "publish c=8", "publish c=32", "pipelined w=64", "pipelined w=256",
		"Client.Consume c=8 defaults",
		"consume c=1 cr=100", "consume c=8 cr=100", "Client.Consume c=8 cr=100",
		"consume c=1 cr=1000", "consume c=8 cr=1000", "Client.Consume c=8 cr=1000",
		"grouped c=8 cr=100",
	}, names)
	assert.Equal(t, "bench.x.grouped", (&runner{qGrouped: "bench.x.grouped"}).queueOf(&scenario{kind: "grouped"}, true))
}

// The Client.Consume side's gate lets exactly k messages through per
// segment and holds the handlers past the k-th until the next one.
func TestClientGateCountsEachSegment(t *testing.T) {
	cs := &clientSide{done: make(chan error, 1), quit: make(chan struct{})}
	closed := newGate(0)
	close(closed.full)
	cs.cur.Store(closed)
	const workers, deliveries = 8, 35
	work := make(chan struct{}, deliveries)
	for range deliveries {
		work <- struct{}{}
	}
	close(work)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				_ = cs.handle(context.Background(), nil, nil)
			}
		}()
	}
	for range 3 {
		res, err := cs.segment(context.Background(), 10)
		require.NoError(t, err)
		assert.Equal(t, 10, res.n)
	}
	close(cs.quit) // what stop does: the 5 left are accepted untimed
	wg.Wait()
	assert.Equal(t, int64(deliveries), cs.handled.Load())
	assert.Equal(t, 30, cs.timed)
}

// countingSender accepts every message and counts them; failAfter > 0
// refuses the messages after that many.
type countingSender struct {
	mu        sync.Mutex
	n         int
	failAfter int
}

func (s *countingSender) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAfter > 0 && s.n >= s.failAfter {
		return errors.New("refused")
	}
	s.n++
	return nil
}

func (s *countingSender) setFailAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failAfter = n
}

func (s *countingSender) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// A side's publishing goroutines serve every segment, each its share, go
// on after a segment's error, and end with the side.
func TestPublishSegmentsShareTheSidesGoroutines(t *testing.T) {
	ctx := context.Background()
	s := &countingSender{}
	r := &runner{cfg: &config{}, data: payload{Currency: "USD"}}
	sd := &side{lib: true, queue: "q", pub: artemis.NewPublisher(s, "q")}
	before := runtime.NumGoroutine()

	got, err := r.publishSegment(ctx, sd, 8, 100)
	require.NoError(t, err)
	assert.Equal(t, 100, got.n)
	ps := sd.publishers
	require.NotNil(t, ps)
	assert.Len(t, ps.todo, 8)
	for _, n := range []int{37, 5} { // fewer than the goroutines, too
		got, err = r.publishSegment(ctx, sd, 8, n)
		require.NoError(t, err)
		assert.Equal(t, n, got.n)
	}
	assert.Same(t, ps, sd.publishers, "the same goroutines, segment after segment")
	assert.Equal(t, 142, s.count())
	_, err = r.publishSegment(ctx, sd, 4, 10)
	require.ErrorContains(t, err, "a segment of 4 publishers on a side that started 8")
	assert.Equal(t, 142, s.count(), "nothing published by a segment of another count")

	s.setFailAfter(150)
	_, err = r.publishSegment(ctx, sd, 8, 40)
	require.ErrorContains(t, err, "refused")
	assert.Equal(t, 150, s.count())
	s.setFailAfter(0)
	_, err = r.publishSegment(ctx, sd, 8, 16)
	require.NoError(t, err, "the goroutines serve the next segment after an error")
	assert.Equal(t, 166, s.count())

	sd.close()
	// Polled here, not with assert.Eventually: its own goroutine counts.
	left := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); left > before && time.Now().Before(deadline); left = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, left, before, "the side's goroutines end with it")
}
