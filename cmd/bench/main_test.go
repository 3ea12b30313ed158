package main

import (
	"testing"

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
	assert.Equal(t, urn, env.Job)
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
