package artemis

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClientSetsAnIdleTimeout(t *testing.T) {
	cases := []struct {
		name string
		opts *ClientOptions
		want time.Duration
	}{
		{"default", nil, DefaultIdleTimeout},
		{"no idle timeout given", &ClientOptions{ConnOptions: &amqp.ConnOptions{ContainerID: "svc"}}, DefaultIdleTimeout},
		{"the caller's", &ClientOptions{ConnOptions: &amqp.ConnOptions{IdleTimeout: 4 * time.Second}}, 4 * time.Second},
		{"turned off", &ClientOptions{ConnOptions: &amqp.ConnOptions{IdleTimeout: -1}}, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, []string{"amqp://live:5672", "amqp://backup:5672"}, tc.opts, nil)
			require.NoError(t, h.dial())
			for _, b := range h.b.brokers {
				assert.Equal(t, tc.want, b.opts.IdleTimeout)
			}
			assert.Equal(t, tc.want, h.fb.dials[0].opts.IdleTimeout, "the dialer is given it")
		})
	}
	assert.Less(t, DefaultIdleTimeout, 20*time.Second, "a half-open connection is noticed well within 20 s")
}

func TestDialPassesTLSAndBaseOptions(t *testing.T) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	base := &amqp.ConnOptions{ContainerID: "orders-svc", IdleTimeout: 10 * time.Second}
	h := newHarness(t, []string{"amqps://u:p@a.example", "amqps://b.example:5671"},
		&ClientOptions{TLSConfig: cfg, ConnOptions: base}, func(fb *fakeBroker) {
			fb.dialErr = func(n int, _ *broker) error {
				if n == 1 {
					return refused
				}
				return nil
			}
		})
	require.NoError(t, h.dial())
	require.Len(t, h.fb.dials, 2)
	for _, b := range h.fb.dials {
		assert.Same(t, cfg, b.opts.TLSConfig)
		assert.Equal(t, "orders-svc", b.opts.ContainerID)
		assert.Equal(t, 10*time.Second, b.opts.IdleTimeout)
	}
	assert.Equal(t, "amqps://a.example", h.fb.dials[0].addr)
}

func TestDialRejectsBadConfiguration(t *testing.T) {
	bad := &Backoff{Initial: time.Second, Max: time.Millisecond, Multiplier: 2}
	cases := []struct {
		name string
		urls []string
		opts *ClientOptions
	}{
		{"no URL", nil, nil},
		{"not a URL", []string{"amqp://babel:" + secret + "@host:99x"}, nil},
		{"control character", []string{"amqp://babel:" + secret + "@host\x7f:5672"}, nil},
		{"wrong scheme", []string{"http://babel:" + secret + "@host:5672"}, nil},
		{"no host", []string{"amqp://babel:" + secret + "@:5672"}, nil},
		{"no scheme", []string{"host:5672"}, nil},
		{"negative dial timeout", []string{"amqp://host"}, &ClientOptions{DialTimeout: -time.Second}},
		{"bad backoff", []string{"amqp://host"}, &ClientOptions{Backoff: bad}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Dial(context.Background(), tc.urls, tc.opts)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			for _, text := range allTexts(err) {
				assert.NotContains(t, text, secret)
			}
		})
	}
}
