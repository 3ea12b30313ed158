package faultproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// echoServer echoes every connection on 127.0.0.1 and counts accepts.
type echoServer struct {
	ln       net.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); e.wg.Wait() })
	return e
}

func start(t *testing.T, e *echoServer, opts ...Option) *Proxy {
	t.Helper()
	p, err := Start(e.ln.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip writes msg and reads it back within timeout.
func roundTrip(c net.Conn, msg []byte, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echo differs")
	}
	return nil
}

// noLeak fails unless the goroutine count falls back to base within 5 s.
func noLeak(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d, want <= %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond) // polling the runtime: there is no event to wait on
	}
}

func TestStartRefusesNonLoopbackAddresses(t *testing.T) {
	e := newEcho(t)
	for _, tc := range []struct{ up, listen string }{
		{"10.0.0.1:5672", "127.0.0.1:0"},
		{"localhost:5672", "127.0.0.1:0"},
		{"127.0.0.1", "127.0.0.1:0"},
		{e.ln.Addr().String(), "0.0.0.0:0"},
		{e.ln.Addr().String(), ":0"},
	} {
		if p, err := Start(tc.up, WithListen(tc.listen)); err == nil {
			_ = p.Close()
			t.Errorf("Start(%q, listen %q): no error", tc.up, tc.listen)
		}
	}
}

func TestPassThroughCarriesBytesBothWays(t *testing.T) {
	p := start(t, newEcho(t))
	c := dial(t, p)
	msg := make([]byte, 1<<20)
	_, _ = rand.Read(msg)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(msg); errc <- err }()
	got := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("echo differs")
	}
	if s := p.Stats(); s.Accepted != 1 || s.Open != 1 || s.BytesUp != 1<<20 || s.BytesDown != 1<<20 {
		t.Fatalf("stats %+v", s)
	}
	if got, want := p.URL(), "amqp://"+p.Addr(); got != want {
		t.Fatalf("URL %q, want %q", got, want)
	}
	u, err := p.Rewrite("amqp://babel:pw@127.0.0.1:5672/x?y=1")
	if err != nil || u != "amqp://babel:pw@"+p.Addr()+"/x?y=1" {
		t.Fatalf("Rewrite: %q, %v", u, err)
	}
	// A clean close from the client reaches the echo server, which closes too.
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseWrite: %d, %v; want EOF", n, err)
	}
}

func TestResetAbortsOpenConnectionsWithRST(t *testing.T) {
	p := start(t, newEcho(t))
	c := dial(t, p)
	if err := roundTrip(c, []byte("before"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset aborted %d connections, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Reset: %v, want ECONNRESET", err)
	}
	if err := roundTrip(dial(t, p), []byte("after"), 5*time.Second); err != nil {
		t.Fatalf("new connection after Reset: %v", err)
	}
	if s := p.Stats(); s.Resets != 1 || s.Accepted != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// expectHeld checks a read times out (no FIN, no RST) while the proxy holds bytes.
func expectHeld(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	n, err := c.Read(make([]byte, 16))
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read while stalled: %d bytes, %v; want a deadline timeout", n, err)
	}
}

func expectEcho(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
}

func TestStallHoldsBytesAndHealDeliversThem(t *testing.T) {
	p := start(t, newEcho(t))
	open := dial(t, p)
	if err := roundTrip(open, []byte("x"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	if _, err := open.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	fresh := dial(t, p) // a new connection is stalled too
	if _, err := fresh.Write([]byte("fresh")); err != nil {
		t.Fatal(err)
	}
	_ = fresh.CloseWrite() // the FIN is held too
	expectHeld(t, open)
	expectHeld(t, fresh)
	p.Heal()
	expectEcho(t, open, "held")
	expectEcho(t, fresh, "fresh")
	if n, err := fresh.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("after the held FIN: %d, %v; want EOF", n, err)
	}
}

func TestRefusedUpstreamResetsTheClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	p, err := Start(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err == nil { // the RST may even beat the connect's return
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("dial or read: %v, want ECONNRESET", err)
	}
	if s := p.Stats(); s.DialFails != 1 || s.Open != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestBlackholeNeverDialsTheUpstream(t *testing.T) {
	e := newEcho(t)
	p := start(t, e)
	p.Blackhole()
	c := dial(t, p)
	if _, err := c.Write([]byte("void")); err != nil {
		t.Fatal(err)
	}
	expectHeld(t, c)
	if s := p.Stats(); s.Accepted != 1 || e.accepted.Load() != 0 || s.BytesUp != 0 {
		t.Fatalf("stats %+v, upstream accepts %d; want 1 accepted and nothing upstream", s, e.accepted.Load())
	}
	p.Heal()
	expectEcho(t, c, "void")
	if e.accepted.Load() != 1 {
		t.Fatalf("upstream accepts %d after Heal, want 1", e.accepted.Load())
	}
}

func TestLatencyDelaysEachDirectionAndKeepsOrder(t *testing.T) {
	const d = 40 * time.Millisecond
	p := start(t, newEcho(t))
	c := dial(t, p)
	p.Latency(d)
	for range 3 {
		t0 := time.Now()
		if err := roundTrip(c, []byte("ping"), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(t0); rtt < 2*d {
			t.Fatalf("round trip %v, want >= %v", rtt, 2*d)
		}
	}
	// Pipelined: 50 writes back to back take about 2d, not 50 times d, and come back in order.
	var want bytes.Buffer
	t0 := time.Now()
	for i := range 50 {
		msg := []byte{byte(i), byte(i), byte(i)}
		want.Write(msg)
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // separate chunks
	}
	expectEcho(t, c, want.String())
	if el := time.Since(t0); el < 2*d || el > 25*d {
		t.Fatalf("50 pipelined writes took %v, want within [%v, %v]", el, 2*d, 25*d)
	}
	p.Latency(0)
	if err := roundTrip(c, []byte("fast"), d); err != nil {
		t.Fatalf("after Latency(0): %v", err)
	}
}

// cutSizes runs n lock-step echo connections through a CutAfter proxy and
// returns the bytes each carried before its RST.
func cutSizes(t *testing.T, seed uint64, n, min, max int) []int64 {
	p := start(t, newEcho(t), WithSeed(seed))
	if err := p.CutAfter(min, max); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 1000)
	var sizes []int64
	for range n {
		before := p.Stats()
		c := dial(t, p)
		var err error
		for i := 0; err == nil && i < 2*max/len(msg)+2; i++ {
			err = roundTrip(c, msg, 5*time.Second)
		}
		if err == nil {
			t.Fatalf("connection not cut after %d bytes", 2*max+4*len(msg))
		}
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("cut gave %v, want ECONNRESET", err)
		}
		after := p.Stats()
		size := after.BytesUp + after.BytesDown - before.BytesUp - before.BytesDown
		if size < int64(min) || size > int64(max) || after.Cuts != before.Cuts+1 || after.Resets != before.Resets+1 {
			t.Fatalf("cut after %d bytes, want [%d, %d]; stats %+v", size, min, max, after)
		}
		sizes = append(sizes, size)
	}
	return sizes
}

func TestCutAfterCutsWithinTheRangeReproducibly(t *testing.T) {
	a := cutSizes(t, 7, 5, 20_000, 300_000)
	b := cutSizes(t, 7, 5, 20_000, 300_000)
	t.Logf("cut sizes %v", a)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different cuts: %v vs %v", a, b)
		}
	}
	if a[0] == a[1] && a[1] == a[2] {
		t.Fatalf("cut sizes do not vary: %v", a)
	}
	p := start(t, newEcho(t))
	for _, r := range [][2]int{{-1, 5}, {10, 5}, {0, 5}} {
		if p.CutAfter(r[0], r[1]) == nil {
			t.Errorf("CutAfter(%d, %d): no error", r[0], r[1])
		}
	}
}

func TestCloseReturnsPromptlyWithStalledConnections(t *testing.T) {
	e := newEcho(t)
	base := runtime.NumGoroutine()
	p, err := Start(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var conns []*net.TCPConn
	for range 3 {
		c := dial(t, p)
		if err := roundTrip(c, []byte("x"), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	p.Stall()
	big := make([]byte, 4<<20) // more than the proxy reads ahead: its readers block on full queues
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			_, _ = c.Write(big)
		}()
	}
	p.Blackhole()
	conns = append(conns, dial(t, p))  // one waiting, never dialled
	time.Sleep(200 * time.Millisecond) // let the writers fill the buffers
	t0 := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el > time.Second {
		t.Fatalf("Close took %v", el)
	}
	wg.Wait() // the client writes fail on the RST, well before their deadline
	for _, c := range conns {
		_ = c.Close()
	}
	noLeak(t, base)
}

func TestConcurrentTogglingIsSafe(t *testing.T) {
	e := newEcho(t)
	base := runtime.NumGoroutine()
	p, err := Start(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
				if err != nil {
					continue
				}
				for ctx.Err() == nil && roundTrip(c, make([]byte, 5000), 100*time.Millisecond) == nil {
					ok.Add(1)
				}
				_ = c.Close()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			switch i % 6 {
			case 0:
				p.Stall()
			case 1:
				p.Heal()
				p.Latency(time.Millisecond)
			case 2:
				_ = p.CutAfter(1000, 50_000)
			case 3:
				p.Reset()
			case 4:
				p.Blackhole()
			case 5:
				p.Heal()
				p.Latency(0)
				_ = p.CutAfter(0, 0)
			}
			_ = p.Stats()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	wg.Wait()
	p.Heal()
	if err := roundTrip(dial(t, p), []byte("still works"), 5*time.Second); err != nil {
		t.Fatalf("after toggling: %v", err)
	}
	s := p.Stats()
	t.Logf("round trips %d, stats %+v", ok.Load(), s)
	if ok.Load() == 0 || s.Resets == 0 {
		t.Fatalf("no traffic or no resets: %d round trips, %+v", ok.Load(), s)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	noLeak(t, base)
}

// TestAMQPThroughProxy dials a real broker through the proxy, stalls,
// heals, then resets.
func TestAMQPThroughProxy(t *testing.T) {
	b := brokertest.Require(t)
	u, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	user, pass := b.User, b.Password
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	conn, err := amqp.Dial(ctx, p.URL(), &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(user, pass)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "bqtest.faultproxy", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, amqp.NewMessage([]byte("through the proxy")), nil); err != nil {
		t.Fatal(err)
	}
	// A stall holds the send's outcome without breaking the connection; Heal lets it go on.
	p.Stall()
	stallCtx, stallCancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = snd.Send(stallCtx, amqp.NewMessage([]byte("during the stall")), nil)
	stallCancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send during the stall: %v, want the context's deadline", err)
	}
	p.Heal()
	if err := snd.Send(ctx, amqp.NewMessage([]byte("after the heal")), nil); err != nil {
		t.Fatalf("Send after Heal: %v", err)
	}
	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset aborted %d connections, want 1", n)
	}
	err = snd.Send(ctx, amqp.NewMessage([]byte("after the reset")), nil)
	var connErr *amqp.ConnError
	if !errors.As(err, &connErr) {
		t.Fatalf("Send after Reset: %v (%T), want *amqp.ConnError", err, err)
	}
	t.Logf("Send after Reset: %v; stats %+v", err, p.Stats())
}
