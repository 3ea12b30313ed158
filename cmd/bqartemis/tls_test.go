package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// writeCert writes a self-signed certificate and its key as PEM files.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "broker.test"},
		DNSNames: []string{"broker.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	c := connFlags{tlsCA: cert, tlsCert: cert, tlsKey: key, tlsServerName: "broker.test"}
	cfg, err := c.tlsConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.ServerName != "broker.test" {
		t.Errorf("config: %+v", cfg)
	}

	bad := filepath.Join(dir, "bad.pem")
	_ = os.WriteFile(bad, []byte("not a certificate"), 0o600)
	for _, tc := range []struct {
		c    connFlags
		want string
	}{
		{connFlags{tlsCA: filepath.Join(dir, "missing.pem")}, "-tls-ca"},
		{connFlags{tlsCA: bad}, "no PEM certificate"},
		{connFlags{tlsCert: cert, tlsKey: bad}, "-tls-cert/-tls-key"},
	} {
		if _, err := tc.c.tlsConfig(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.c, err, tc.want)
		}
	}

	// A broker whose certificate the CA does not sign: a runtime error
	// (exit 1) from the TLS handshake, never the password.
	out, errOut, code := runCLI(t, map[string]string{envURL: "amqps://babel@127.0.0.1:1", envPassword: "tls-s3cret"}, "",
		"stats", "-tls-ca", cert, "-tls-server-name", "broker.test", "-timeout", "5s")
	if code != exitFailed || strings.Contains(out+errOut, "tls-s3cret") || !strings.Contains(errOut, "amqps://babel@127.0.0.1:1") {
		t.Errorf("exit %d: %s%s", code, out, errOut)
	}
}

// tlsBrokerEnv is brokerEnv on the broker's TLS acceptor (ARTEMIS_TLS_URL,
// ARTEMIS_TLS_CA from scripts/artemis start) with host, and the CA file.
func tlsBrokerEnv(t *testing.T, scheme, host string) (map[string]string, string) {
	t.Helper()
	env := brokerEnv(t)
	raw, ca := os.Getenv("ARTEMIS_TLS_URL"), os.Getenv("ARTEMIS_TLS_CA")
	if raw == "" || ca == "" {
		t.Skip("TLS test skipped: ARTEMIS_TLS_URL / ARTEMIS_TLS_CA are not set (scripts/artemis start exports them)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme, u.Host, u.User = scheme, host+":"+u.Port(), url.User(u.User.Username())
	env[envURL] = u.String()
	return env, ca
}

// TestIntegrationTLSWithItsCA: -tls-ca with the broker's CA works on the
// DNS SAN (localhost) and the IP SAN; a wrong CA, a wrong -tls-server-name
// and plain AMQP to the TLS port are refused in under a second, saying
// why, the password hidden.
func TestIntegrationTLSWithItsCA(t *testing.T) {
	env, ca := tlsBrokerEnv(t, "amqps", "localhost")
	q := brokertest.Queue(t)
	cli(t, env, "publish", q, "urn:babel:tls:checked", `{"n":1}`, "-tls-ca", ca)
	ipEnv, _ := tlsBrokerEnv(t, "amqps", "127.0.0.1")
	if n := len(jsonLines(t, cli(t, ipEnv, "peek", q, "-json", "-tls-ca", ca))); n != 1 {
		t.Fatalf("peek over TLS saw %d messages, want 1", n)
	}

	wrongCA, _ := writeCert(t, t.TempDir())
	plainEnv, _ := tlsBrokerEnv(t, "amqp", "127.0.0.1")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"wrong CA", env, []string{"-tls-ca", wrongCA}, "certificate signed by unknown authority"},
		{"wrong server name", ipEnv, []string{"-tls-ca", ca, "-tls-server-name", "broker.example"}, "not broker.example"},
		{"plain AMQP to the TLS port", plainEnv, nil, "it is a TLS acceptor; dial it with amqps://"},
	} {
		// Refused before SASL: a password of its own shows any piece printed.
		const password = "Tq9#Lx/Vw"
		e := map[string]string{envURL: tc.env[envURL], envPassword: password}
		start := time.Now()
		out, errOut, code := runCLI(t, e, "", append([]string{"peek", q}, tc.args...)...)
		took := time.Since(start)
		if code == exitOK || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d\n%s%s", tc.name, code, out, errOut)
		}
		if took > time.Second {
			t.Errorf("%s: refused after %v", tc.name, took)
		}
		for i := 0; i+3 <= len(password); i++ {
			if strings.Contains(out+errOut, password[i:i+3]) {
				t.Errorf("%s: a piece of the password is shown:\n%s%s", tc.name, out, errOut)
			}
		}
	}
}
