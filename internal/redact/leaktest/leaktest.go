// Package leaktest holds the table of broker URL forms the library's and
// the bqartemis tool's tests dial, each with a password that holds
// characters a URL gives a meaning to, written as it should be
// (percent-encoded), as it often is (raw), and malformed. Check asserts
// that a text shows neither the password nor any piece of it.
package leaktest

import (
	"net"
	"strings"
	"testing"
	"time"
)

// Case is one URL form. URL holds {host} where the test's address goes.
// Secrets are the password as the user meant it and as the URL writes it:
// no text may show any of them, or any piece of three characters or more
// of them. EnvPassword, when set, is the password given apart from the
// URL (ClientOptions.Password, $ARTEMIS_PASSWORD); it is among Secrets.
type Case struct {
	URL         string
	Secrets     []string
	EnvPassword string
}

// Cases are the URL forms. Every password is distinct, so the cases can run
// in parallel, and none shares three characters with another text the
// library or the tool prints (the user is always "svc"). No piece of a
// password is made only of digits and the characters around them in an
// address (AddressChars): errors quote the dialling side's address too,
// whose ephemeral port a test cannot choose, and a port such as 40782 must
// never show a piece of a password (TestNoPieceFitsInAnAddress). A
// password that url.Parse turns into a port starts with one digit.
func Cases() []Case {
	return []Case{
		// Raw passwords that url.Parse reads wrongly: part of the password
		// becomes the host, the port, the path, the query or the fragment.
		{URL: "amqp://svc:9/Xk9+q==@{host}", Secrets: []string{"9/Xk9+q=="}},
		{URL: "amqp://svc:7#tops3cret@{host}", Secrets: []string{"7#tops3cret"}},
		{URL: "amqp://svc:/Zq8s3cret@{host}", Secrets: []string{"/Zq8s3cret"}},
		{URL: "amqp://admin:P@ss/word1@{host}", Secrets: []string{"P@ss/word1"}},
		{URL: "amqp://svc:qz?9Lm@{host}", Secrets: []string{"qz?9Lm"}},
		{URL: "amqp://svc:Bv9/Qx@2#k@{host}", Secrets: []string{"Bv9/Qx@2#k"}},
		{URL: "amqp://Rk8@Wz/Lm4@{host}", Secrets: []string{"Rk8@Wz/Lm4"}},
		{URL: "amqps://svc:Zt5#Yw2@{host}", Secrets: []string{"Zt5#Yw2"}},
		{URL: "amqp://svc:Dm4Jx7@{host}/path?x=a@b", Secrets: []string{"Dm4Jx7"}},
		{URL: "amqp://svc:Kq2?x=1@{host}", Secrets: []string{"Kq2?x=1"}},
		// Raw passwords that url.Parse reads right, or rejects.
		{URL: "amqp://svc:Xk8+q==@{host}", Secrets: []string{"Xk8+q==", "Xk8%2Bq%3D%3D"}},
		{URL: "amqp://svc:Jm7:Kp2@{host}", Secrets: []string{"Jm7:Kp2"}},
		{URL: "amqp://svc:Hq7@Wt9@{host}", Secrets: []string{"Hq7@Wt9"}},
		{URL: "amqp://:Vn4Tq8x@{host}", Secrets: []string{"Vn4Tq8x"}},
		{URL: "amqp://svc:50%offZ!@{host}", Secrets: []string{"50%offZ!"}},
		{URL: "amqp://svc:a%zzQk7@{host}", Secrets: []string{"a%zzQk7"}},
		{URL: "amqp://svc:Gf6 Hk3@{host}", Secrets: []string{"Gf6 Hk3"}},
		{URL: `amqp://svc:Yp5\Lr8@{host}`, Secrets: []string{`Yp5\Lr8`}},
		{URL: "amqp://svc:Üñ9ødé@{host}", Secrets: []string{"Üñ9ødé"}},
		{URL: "amqp://svc:Cw3Nb6@@{host}", Secrets: []string{"Cw3Nb6@"}},
		// Percent-encoded, as they should be written.
		{URL: "amqp://svc:P%40ss%2Fword2@{host}", Secrets: []string{"P@ss/word2", "P%40ss%2Fword2"}},
		{URL: "amqp://svc:Xk7%2Bq%3D%3D@{host}", Secrets: []string{"Xk7+q==", "Xk7%2Bq%3D%3D"}},
		{URL: "amqp://svc:8%23tops4cret@{host}", Secrets: []string{"8#tops4cret", "8%23tops4cret"}},
		{URL: "amqp://svc:q%3Fz8Ln@{host}", Secrets: []string{"q?z8Ln", "q%3Fz8Ln"}},
		{URL: "amqp://svc:51%25offY@{host}", Secrets: []string{"51%offY", "51%25offY"}},
		{URL: "amqp://svc:Ef5%20Hj2@{host}", Secrets: []string{"Ef5 Hj2", "Ef5%20Hj2"}},
		{URL: "amqps://svc:Wq3%2FTz%40@{host}", Secrets: []string{"Wq3/Tz@", "Wq3%2FTz%40"}},
		// Malformed around the userinfo.
		{URL: "amqp:svc:Gf7Hk4@{host}", Secrets: []string{"Gf7Hk4"}},
		{URL: "amqp:/svc:Gf8Hk5@{host}", Secrets: []string{"Gf8Hk5"}},
		{URL: "amqp//svc:Gf9Hk6@{host}", Secrets: []string{"Gf9Hk6"}},
		{URL: "svc:Ga1Hm7@{host}", Secrets: []string{"Ga1Hm7"}},
		{URL: "AMQP://svc:Ga2Hm8@{host}", Secrets: []string{"Ga2Hm8"}},
		{URL: "http://svc:Ga3Hm9@{host}", Secrets: []string{"Ga3Hm9"}},
		{URL: "amqp://svc:Gb4Hn1@[::1", Secrets: []string{"Gb4Hn1"}},
		{URL: "amqp://svc:Gb5Hn2@127.0.0.1:99x", Secrets: []string{"Gb5Hn2"}},
		{URL: "amqp://svc:Gb6Hn3@", Secrets: []string{"Gb6Hn3"}},
		{URL: " amqp://svc:Gb7Hn4@{host}", Secrets: []string{"Gb7Hn4"}},
		// The password apart from the URL.
		{URL: "amqp://svc@{host}", EnvPassword: "Tv8/Qy@3#m", Secrets: []string{"Tv8/Qy@3#m"}},
		{URL: "amqp://svc:Mc2Rd5@{host}", EnvPassword: "Nd3Se6", Secrets: []string{"Mc2Rd5", "Nd3Se6"}},
	}
}

// AddressChars are the characters a TCP address or port in an error text
// is written with ("127.0.0.1:40782", "[::1]:5672", "a->b").
const AddressChars = "0123456789.:[]->"

// URLFor is c's URL with addr as its host.
func (c Case) URLFor(addr string) string { return strings.ReplaceAll(c.URL, "{host}", addr) }

// Pieces are every piece of three characters or more of c's secrets: a
// text that holds none of them holds no part of a password that long.
func (c Case) Pieces() []string {
	var out []string
	for _, s := range c.Secrets {
		r := []rune(s)
		for i := 0; i+3 <= len(r); i++ {
			out = append(out, string(r[i:i+3]))
		}
	}
	return out
}

// Check fails t when text shows a secret of c or a piece of one.
func Check(t testing.TB, c Case, where, text string) {
	t.Helper()
	for _, s := range c.Secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s shows the password %q: %s", where, s, text)
			return
		}
	}
	for _, p := range c.Pieces() {
		if strings.Contains(text, p) {
			t.Errorf("%s shows %q, a piece of the password: %s", where, p, text)
			return
		}
	}
}

// listen opens a loopback listener whose address shares no piece with any
// case's secrets: errors quote the address. (No piece can be in an address
// at all, see Cases; this stays as a second guard for a case added later.)
func listen(t testing.TB) net.Listener {
	t.Helper()
	var pieces []string
	for _, c := range Cases() {
		pieces = append(pieces, c.Pieces()...)
	}
	for try := 0; try < 100; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		clean := true
		for _, p := range pieces {
			clean = clean && !strings.Contains(l.Addr().String(), p)
		}
		if clean {
			return l
		}
		_ = l.Close()
	}
	t.Fatal("no loopback port free of the passwords' pieces in 100 tries")
	return nil
}

// ClosedPort returns a loopback address nothing listens on: a dial to it
// is refused.
func ClosedPort(t testing.TB) string {
	t.Helper()
	l := listen(t)
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// SilentPort returns a loopback address that accepts connections and never
// answers, as an unreachable broker behind a black hole looks: a dial to
// it times out. It is closed with the test.
func SilentPort(t testing.TB) string {
	t.Helper()
	l := listen(t)
	done := make(chan struct{})
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		_ = l.Close()
		time.Sleep(10 * time.Millisecond)
	})
	return l.Addr().String()
}
