package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
