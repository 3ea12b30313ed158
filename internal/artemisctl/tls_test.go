package artemisctl

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestConfigureTLSAcceptor: a single broker's broker.xml gets one amqps
// acceptor, also after a second start; a pair's node gets none.
func TestConfigureTLSAcceptor(t *testing.T) {
	c, _, _ := testCtl(t)
	i := newInstanceDir(t, c, "bgo-tls", "AMQP_PORT=20001", "CORE_PORT=20002", "USER=babel", "PASSWORD=babel")
	if !i.hasTLS() {
		t.Fatal("a single broker has no TLS acceptor")
	}
	for run := 0; run < 2; run++ {
		if err := i.configure(20001, 20002, 20003); err != nil {
			t.Fatal(err)
		}
		xml := readEtc(t, i, "broker.xml")
		if n := strings.Count(xml, `<acceptor name="amqps">tcp://127.0.0.1:20003?protocols=AMQP;`); n != 1 {
			t.Fatalf("start %d: %d amqps acceptors:\n%s", run+1, n, xml)
		}
		if !strings.Contains(xml, "sslEnabled=true;keyStoreType=PKCS12;keyStorePath="+i.tlsKeystore()) {
			t.Errorf("the acceptor does not use the instance's keystore:\n%s", xml)
		}
	}
	ha := newInstanceDir(t, c, "bgoha-primary", "AMQP_PORT=20001", "CORE_PORT=20002", "USER=babel", "PASSWORD=babel", "HA_ROLE=primary", "HA_PEER_CORE=20004")
	if ha.hasTLS() {
		t.Error("a pair's node has the TLS acceptor")
	}
}

func TestExportLinesTLS(t *testing.T) {
	c, _, _ := testCtl(t)
	i := writeState(t, c, "bgo-tls-env", "AMQP_PORT=5999", "CORE_PORT=6999", "USER=babel", "PASSWORD=p@ss", "TLS_PORT=7999")
	want := "export ARTEMIS_TLS_URL=amqps://babel:p%40ss@127.0.0.1:7999\n" +
		"export ARTEMIS_TLS_CA=" + i.TLSCA() + "\n"
	if got := i.Env(); !strings.HasSuffix(got, want) {
		t.Errorf("Env:\n%s\nwant it to end with:\n%s", got, want)
	}
}

// TestEnsureTLSMakesAChainAClientTrusts: keytool's CA and server
// certificate verify for localhost and 127.0.0.1 against the CA file,
// and a second call makes nothing new.
func TestEnsureTLSMakesAChainAClientTrusts(t *testing.T) {
	if _, err := exec.LookPath("keytool"); err != nil {
		t.Skip("keytool not installed")
	}
	c, _, _ := testCtl(t)
	i := newInstanceDir(t, c, "bgo-tls-keys", "AMQP_PORT=1", "CORE_PORT=2", "USER=u", "PASSWORD=p")
	if err := i.ensureTLS(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(i.tlsKeystore())
	if err != nil {
		t.Fatal(err)
	}
	if err := i.ensureTLS(); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(i.tlsKeystore()); !st2.ModTime().Equal(st.ModTime()) {
		t.Error("the keystore was made again")
	}
	caPEM, err := os.ReadFile(i.TLSCA())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	serverPEM, err := os.ReadFile(i.tlsDir() + "/server.pem")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(serverPEM)
	if block == nil {
		t.Fatal("server.pem holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	opts := x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, name := range []string{"localhost", "127.0.0.1"} {
		opts.DNSName = name
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	opts.DNSName = "example.com"
	if _, err := cert.Verify(opts); err == nil {
		t.Error("the certificate verifies for example.com")
	}
}
