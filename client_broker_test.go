package artemis

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDialCredentials(t *testing.T) {
	cases := []struct {
		name      string
		url       string
		opts      *ClientOptions
		plain     bool
		user      string
		pass      string
		wantAddr  string
		wantShown string
	}{
		{"userinfo", "amqp://u1:p1@h:5672", nil, true, "u1", "p1", "amqp://h:5672", "amqp://u1:xxxxx@h:5672"},
		{"options win over userinfo", "amqp://u1:p1@h:5672", &ClientOptions{Username: "u2", Password: "p2"}, true, "u2", "p2", "amqp://h:5672", "amqp://u1:xxxxx@h:5672"},
		{"options only", "amqp://h", &ClientOptions{Username: "u2", Password: "p2"}, true, "u2", "p2", "amqp://h", "amqp://h"},
		{"none", "amqp://h:5672", nil, false, "", "", "amqp://h:5672", "amqp://h:5672"},
		{"user without password", "amqp://u1@h:5672/", nil, true, "u1", "", "amqp://h:5672/", "amqp://u1@h:5672/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, []string{tc.url}, tc.opts, nil)
			require.NoError(t, h.dial())
			b := h.fb.dials[0]
			assert.Equal(t, tc.plain, b.plain)
			assert.Equal(t, tc.user, b.user)
			assert.Equal(t, tc.pass, b.pass)
			assert.Equal(t, tc.wantAddr, b.addr)
			assert.Equal(t, tc.wantShown, b.shown)
			assert.Nil(t, b.opts.SASLType, "SASL is set by the dialer from the credentials, not inherited")
		})
	}
}

func TestDialFollowsAConnectionRedirect(t *testing.T) {
	redirect := func(host string, port any) error {
		return &amqp.ConnError{RemoteErr: &amqp.Error{
			Condition:   conditionRedirect,
			Description: "Connection router redirected this connection",
			Info:        map[string]any{"network-host": host, "port": port},
		}}
	}
	h := newHarness(t, []string{"amqp://babel:" + secret + "@router:5672"}, nil, func(fb *fakeBroker) {
		fb.dialErr = func(_ int, b *broker) error {
			if strings.Contains(b.addr, "router") {
				return redirect("10.0.0.9", int32(61617))
			}
			return nil
		}
	})
	require.NoError(t, h.dial())
	assert.Equal(t, []string{"amqp://router:5672", "amqp://10.0.0.9:61617"}, h.fb.dialed())
	st := h.c.Status()
	assert.Equal(t, "amqp://babel:xxxxx@10.0.0.9:61617", st.URL)
	assert.Equal(t, "babel", h.fb.dials[1].user, "the same credentials")
	assert.Equal(t, secret, h.fb.dials[1].pass)

	// A router that redirects for ever is given up after a few hops.
	loop := newHarness(t, []string{"amqp://router:5672"}, nil, func(fb *fakeBroker) {
		fb.dialErr = func(int, *broker) error { return redirect("router", uint16(5672)) }
	})
	err := loop.dial()
	assert.ErrorIs(t, err, ErrConnect)
	assert.Contains(t, err.Error(), "redirects")
	assert.Len(t, loop.fb.dialed(), maxRedirects+1)
}

func TestRedirectOfReadsOnlyARedirect(t *testing.T) {
	_, ok := redirectOf(&amqp.ConnError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondConnectionForced}})
	assert.False(t, ok)
	_, ok = redirectOf(errors.New("plain"))
	assert.False(t, ok)
	_, ok = redirectOf(&amqp.Error{Condition: conditionRedirect, Info: map[string]any{"network-host": "h"}})
	assert.False(t, ok, "no port")
	got, ok := redirectOf(fmt.Errorf("begin session: %w", &amqp.Error{Condition: conditionRedirect, Info: map[string]any{"hostname": "h", "port": int64(1)}}))
	assert.True(t, ok)
	assert.Equal(t, "h:1", got)
}
