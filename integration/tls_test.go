package integration_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// tlsBroker is the broker's TLS acceptor (scripts/artemis start exports
// ARTEMIS_TLS_URL and ARTEMIS_TLS_CA): its URL and a pool of its CA.
func tlsBroker(t *testing.T) (*url.URL, *x509.CertPool) {
	t.Helper()
	brokertest.Require(t)
	raw, caFile := os.Getenv("ARTEMIS_TLS_URL"), os.Getenv("ARTEMIS_TLS_CA")
	if raw == "" || caFile == "" {
		t.Skip("TLS test skipped: ARTEMIS_TLS_URL / ARTEMIS_TLS_CA are not set (scripts/artemis start exports them)")
	}
	u, err := url.Parse(raw)
	require.NoError(t, err)
	pem, err := os.ReadFile(caFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem), "no certificate in %s", caFile)
	return u, pool
}

// withHost is u with scheme and host (its port kept).
func withHost(u *url.URL, scheme, host string) string {
	c := *u
	c.Scheme, c.Host = scheme, host+":"+u.Port()
	return c.String()
}

// TestIntegrationTLSRoundTrip: amqps:// and amqp+ssl:// to the IP SAN and
// the DNS SAN (localhost), verified against the instance's CA, publish
// and consume.
func TestIntegrationTLSRoundTrip(t *testing.T) {
	u, pool := tlsBroker(t)
	for _, raw := range []string{
		withHost(u, "amqps", "127.0.0.1"),
		withHost(u, "amqp+ssl", "127.0.0.1"),
		withHost(u, "amqps", "localhost"),
	} {
		shown := strings.Replace(raw, u.User.String()+"@", "", 1)
		t.Run(shown, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := artemis.Dial(ctx, []string{raw}, &artemis.ClientOptions{TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
			require.NoError(t, err)
			defer c.Close(context.Background())
			q := brokertest.Queue(t)
			pub, err := c.Publisher(ctx, q)
			require.NoError(t, err)
			id, err := pub.Publish(ctx, artemis.Job("urn:babel:tls:checked", map[string]string{"over": "tls"}))
			require.NoError(t, err)
			got := make(chan *artemis.Envelope, 1)
			cons := testkit.MustConsumer(t, artemis.Handlers{"urn:babel:tls:checked": func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
				got <- env
				return nil
			}}, artemis.WithoutDeadLetter())
			stop := testkit.ConsumeInBackground(t, c, q, cons, 10*time.Second)
			select {
			case env := <-got:
				assert.Equal(t, id, env.Meta.ID)
				assert.JSONEq(t, `{"over":"tls"}`, string(env.Data))
			case <-ctx.Done():
				t.Fatal("the message did not come back over TLS")
			}
			stop()
		})
	}
}

// otherCA is a CA that signed nothing the broker has.
func otherCA(t *testing.T) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the broker's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// TestIntegrationTLSRefusals: a wrong CA, a name the certificate does not
// hold, plain AMQP to the TLS port and TLS to the plain port each fail in
// under a second (never the dial timeout), saying why, no piece of the
// password in the error, its chain or the events.
func TestIntegrationTLSRefusals(t *testing.T) {
	u, pool := tlsBroker(t)
	plain, err := url.Parse(brokertest.Require(t).URL)
	require.NoError(t, err)
	// Each refusal comes before SASL, so a password of its own shows
	// whether any piece of it is printed (the broker's is "babel", a piece
	// of the library's module path).
	const password = "Tq9#Lx/Vw"
	u2, plain2 := *u, *plain
	u2.User, plain2.User = url.UserPassword("babel", password), url.UserPassword("babel", password)
	u, plain = &u2, &plain2
	for _, tc := range []struct {
		name string
		url  string
		tls  *tls.Config
		want string
	}{
		{"wrong CA", withHost(u, "amqps", "127.0.0.1"), &tls.Config{RootCAs: otherCA(t)}, "certificate signed by unknown authority"},
		{"wrong server name", withHost(u, "amqps", "127.0.0.1"), &tls.Config{RootCAs: pool, ServerName: "broker.example"}, "not broker.example"},
		{"plain AMQP to the TLS port", withHost(u, "amqp", "127.0.0.1"), nil, "it is a TLS acceptor; dial it with amqps://"},
		{"TLS to the plain port", withHost(plain, "amqps", "127.0.0.1"), &tls.Config{RootCAs: pool}, "it is a plain acceptor; dial it with amqp://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var events []artemis.ConnectionEvent
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			_, err := artemis.Dial(ctx, []string{tc.url}, &artemis.ClientOptions{TLSConfig: tc.tls, DialTimeout: 20 * time.Second,
				OnEvent: func(ev artemis.ConnectionEvent) { events = append(events, ev) }})
			took := time.Since(start)
			require.Error(t, err)
			assert.Less(t, took, time.Second, "refused after %v: %v", took, err)
			assert.ErrorIs(t, err, artemis.ErrConnect)
			assert.Contains(t, err.Error(), tc.want)
			texts := []string{err.Error()}
			for e := err; e != nil; e = errors.Unwrap(e) {
				texts = append(texts, e.Error())
			}
			for _, ev := range events {
				texts = append(texts, ev.URL)
				if ev.Err != nil {
					texts = append(texts, ev.Err.Error())
				}
			}
			for _, text := range texts {
				for i := 0; i+3 <= len(password); i++ {
					assert.NotContains(t, text, password[i:i+3], "a piece of the password is shown")
				}
				assert.NotContains(t, text, url.QueryEscape(password)[:5], "the escaped password is shown")
			}
		})
	}
}
