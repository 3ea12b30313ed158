package artemis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCredentialsFieldByField: a credential set in ClientOptions replaces
// that field of the URL's userinfo only; the other field still comes from
// the URL.
func TestCredentialsFieldByField(t *testing.T) {
	cases := []struct {
		name         string
		url          string
		user, pass   string // ClientOptions
		wantU, wantP string
		wantPlain    bool
	}{
		{"URL only", "amqp://u:p@h:1", "", "", "u", "p", true},
		{"option user keeps the URL's password", "amqp://u:p@h:1", "svc", "", "svc", "p", true},
		{"option password keeps the URL's user", "amqp://u:p@h:1", "", "pw", "u", "pw", true},
		{"both options", "amqp://u:p@h:1", "svc", "pw", "svc", "pw", true},
		{"options only", "amqp://h:1", "svc", "pw", "svc", "pw", true},
		{"option user, no password anywhere", "amqp://h:1", "svc", "", "svc", "", true},
		{"URL user, option password", "amqp://u@h:1", "", "pw", "u", "pw", true},
		{"URL password with no user, option user", "amqp://:p@h:1", "svc", "", "svc", "p", true},
		{"decoded from the URL", "amqp://u%40x:p%2Fq@h:1", "", "", "u@x", "p/q", true},
		{"none", "amqp://h:1", "", "", "", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newClient([]string{tc.url}, &ClientOptions{Username: tc.user, Password: tc.pass}, newFakeBroker(t).dial)
			require.NoError(t, err)
			b := c.brokers[0]
			assert.Equal(t, tc.wantU, b.user, "user")
			assert.Equal(t, tc.wantP, b.pass, "password")
			assert.Equal(t, tc.wantPlain, b.plain, "SASL PLAIN")
		})
	}
}

// TestAmbiguousURLIsRefused: a URL whose userinfo holds an unescaped "@",
// "/", "?" or "#" is refused before any dial, with the whole userinfo
// masked and the way to write it.
func TestAmbiguousURLIsRefused(t *testing.T) {
	for _, raw := range []string{
		"amqp://admin:P@ss/word1@h:1",
		"amqp://svc:2024/Xk9+q==@h:1",
		"amqp://svc:7781#tops3cret@h:1",
		"amqp://svc:qz?9Lm@h:1",
		"amqp://svc:pw@h:1/path?x=a@b",
	} {
		fb := newFakeBroker(t)
		_, err := newClient([]string{raw}, nil, fb.dial)
		require.ErrorIs(t, err, ErrInvalidConfig, raw)
		assert.Contains(t, err.Error(), "amqp://xxxxx@", raw)
		assert.Contains(t, err.Error(), "percent-encode", raw)
	}
}
