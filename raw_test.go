package artemis

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// The stored bytes go out as the body, unchanged, with the projection
// Publish gives the same envelope.
func TestPublishEncodedSendsTheBytesAsTheyAre(t *testing.T) {
	env, err := NewEnvelope(urnCreated, map[string]any{"n": json.Number("12345678901234567890"), "who": "Zoë </>"}, EnvelopeQueue("orders"))
	require.NoError(t, err)
	body, err := env.Encode()
	require.NoError(t, err)
	opts := []PublishOption{WithDuplicateDetection(), WithGroupID("customer-7"),
		WithHeaders(map[string]string{"traceparent": "00-a-b-01"}), WithDelay(time.Hour)}

	fs := &fakelink.Sender{}
	var outcomes []string
	p := NewPublisher(fs, "orders", WithOnOutcome(func(id string, err error) {
		assert.NoError(t, err)
		outcomes = append(outcomes, id)
	}))
	r, err := p.PublishWithReceipt(context.Background(), Encoded(body), opts...)
	require.NoError(t, err)
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, env.Meta.ID, r.ID())
	assert.Equal(t, []string{env.Meta.ID}, outcomes)

	ref := &fakelink.Sender{}
	_, err = NewPublisher(ref, "orders").Publish(context.Background(), env, opts...)
	require.NoError(t, err)

	got, want := wireDecoded(t, fs.Sent()[0]), wireDecoded(t, ref.Sent()[0])
	assert.Equal(t, string(body), got.Value, "the body is the stored bytes")
	assert.Equal(t, want.Value, got.Value)
	assert.Equal(t, want.Properties, got.Properties)
	assert.Equal(t, want.Header, got.Header)
	assert.Equal(t, env.Meta.ID, got.ApplicationProperties[PropDuplicateID])
	assert.Equal(t, want.ApplicationProperties, got.ApplicationProperties)
	assert.Contains(t, got.Annotations, AnnotationDeliveryTime)
	assert.Equal(t, urnCreated, got.Annotations[AnnotationJMSType])
}

// A body that is not a valid envelope in its canonical encoding is refused,
// and nothing is sent.
func TestPublishEncodedRefusesWhatIsNotCanonical(t *testing.T) {
	env, err := NewEnvelope(urnCreated, map[string]int{"n": 1}, EnvelopeQueue("orders"))
	require.NoError(t, err)
	body, err := env.Encode()
	require.NoError(t, err)
	spaced := append([]byte(" "), body...)
	v2 := []byte(`{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"id":"i","queue":"orders","lang":"go","schema_version":2,"created_at":1},"attempts":0}`)

	for name, b := range map[string][]byte{
		"not JSON": []byte("nope"), "empty": nil, "whitespace": spaced, "schema version 2": v2,
	} {
		t.Run(name, func(t *testing.T) {
			fs := &fakelink.Sender{}
			var seen []error
			p := NewPublisher(fs, "orders", WithOnOutcome(func(_ string, err error) { seen = append(seen, err) }))
			r, err := p.PublishWithReceipt(context.Background(), Encoded(b))
			require.ErrorIs(t, err, ErrInvalidEnvelope)
			assert.Nil(t, r)
			assert.Zero(t, fs.Count(), "nothing sent")
			require.Len(t, seen, 1)
			assert.ErrorIs(t, seen[0], ErrInvalidEnvelope)
		})
	}
}
