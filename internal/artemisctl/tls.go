package artemisctl

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The TLS acceptor of a single broker: "amqps", AMQP over TLS on a port of
// its own, with a server certificate (DNS SAN localhost, IP SAN 127.0.0.1)
// signed by a CA made for this instance. keytool makes both once per
// instance, at its first start with TLS; later starts reuse them (each
// keytool run starts a JVM). Clients trust the CA's PEM file
// (ARTEMIS_TLS_CA).

// tlsStorePass is the keystores' password: test material on loopback,
// not a secret.
const tlsStorePass = "bq-test-keystore"

// tlsDir holds the CA and the server keystore.
func (i *Instance) tlsDir() string { return filepath.Join(i.Dir, "etc", "bq-tls") }

// TLSCA is the CA certificate (PEM) a client trusts.
func (i *Instance) TLSCA() string { return filepath.Join(i.tlsDir(), "ca.pem") }

// tlsKeystore is the server's PKCS12 keystore: its key and chain.
func (i *Instance) tlsKeystore() string { return filepath.Join(i.tlsDir(), "server.p12") }

// hasTLS reports whether this instance gets the TLS acceptor: a single
// broker, not a pair's or a cluster's node.
func (i *Instance) hasTLS() bool {
	return i.Get("HA_ROLE") == "" && i.Get("CLUSTER_PEERS") == "" && !i.waitBackup
}

// ensureTLS makes the CA and the server keystore unless both exist.
func (i *Instance) ensureTLS() error {
	if exists(i.TLSCA()) && exists(i.tlsKeystore()) {
		return nil
	}
	if err := i.c.need(i.Name, "keytool", "the JDK's keytool", "openjdk-17-jre-headless"); err != nil {
		return err
	}
	dir := i.tlsDir()
	tmp := dir + ".new"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return i.die("%v", err)
	}
	i.logf("making the TLS acceptor's CA and server certificate with keytool (once per instance) ...")
	ca, server := filepath.Join(tmp, "ca.p12"), filepath.Join(tmp, "server.p12")
	store := func(path string) []string {
		return []string{"-keystore", path, "-storetype", "PKCS12", "-storepass", tlsStorePass}
	}
	key := []string{"-keyalg", "EC", "-groupname", "secp256r1", "-validity", "3650"}
	// Stages: the steps of one stage run side by side (each is a JVM start).
	stages := [][][]string{
		{
			append(append([]string{"-genkeypair", "-alias", "ca", "-dname", "CN=babelqueue test CA", "-ext", "bc:c"}, key...), store(ca)...),
			append(append([]string{"-genkeypair", "-alias", "server", "-dname", "CN=localhost"}, key...), store(server)...),
		},
		{
			append([]string{"-certreq", "-alias", "server", "-file", filepath.Join(tmp, "server.csr")}, store(server)...),
			append([]string{"-exportcert", "-alias", "ca", "-rfc", "-file", filepath.Join(tmp, "ca.pem")}, store(ca)...),
		},
		{append([]string{"-gencert", "-alias", "ca", "-rfc", "-validity", "3650", "-infile", filepath.Join(tmp, "server.csr"),
			"-outfile", filepath.Join(tmp, "server.pem"), "-ext", "SAN=dns:localhost,ip:127.0.0.1",
			"-ext", "KU=digitalSignature,keyEncipherment", "-ext", "EKU=serverAuth"}, store(ca)...)},
		{append([]string{"-importcert", "-noprompt", "-alias", "ca", "-file", filepath.Join(tmp, "ca.pem")}, store(server)...)},
		{append([]string{"-importcert", "-noprompt", "-alias", "server", "-file", filepath.Join(tmp, "server.pem")}, store(server)...)},
	}
	for _, stage := range stages {
		errs := make(chan error, len(stage))
		for _, args := range stage {
			go func() {
				cmd := exec.Command("keytool", args...)
				cmd.Env = i.c.childEnv()
				out, err := cmd.CombinedOutput()
				if err != nil {
					err = fmt.Errorf("keytool %s: %w\n%s", args[0], err, strings.TrimSpace(string(out)))
				}
				errs <- err
			}()
		}
		for range stage {
			if err := <-errs; err != nil {
				return i.die("%v", err)
			}
		}
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return i.die("%v", err)
	}
	return nil
}

// tlsAcceptor is the amqps acceptor element on port, with the AMQP
// acceptor's settings.
func (i *Instance) tlsAcceptor(port int) string {
	return fmt.Sprintf(`<acceptor name="amqps">tcp://127.0.0.1:%d?protocols=AMQP;useEpoll=true;amqpCredits=1000;amqpLowCredits=300;`+
		`amqpMinLargeMessageSize=102400;amqpDuplicateDetection=true;sslEnabled=true;keyStoreType=PKCS12;keyStorePath=%s;keyStorePassword=%s</acceptor>`,
		port, xmlEscape(i.tlsKeystore()), tlsStorePass)
}

// ConfigureTLS adds the amqps acceptor (acceptor, as tlsAcceptor makes it)
// to the acceptors ConfigureBase wrote.
func ConfigureTLS(xml, acceptor string) (string, error) {
	if !strings.Contains(xml, "</acceptors>") {
		return "", fmt.Errorf("broker.xml: could not find </acceptors>")
	}
	return strings.Replace(xml, "</acceptors>", "   "+acceptor+"\n      </acceptors>", 1), nil
}

// TLSURL is the instance's amqps URL with its credentials ("" without a
// TLS acceptor).
func (i *Instance) TLSURL() string {
	port := i.Get("TLS_PORT")
	if port == "" || i.URL() == "" {
		return ""
	}
	return "amqps://" + urlencode(i.Get("USER")) + ":" + urlencode(i.Get("PASSWORD")) + "@127.0.0.1:" + port
}
