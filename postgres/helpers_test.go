package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/faultproxy"
)

// The tests run on a real PostgreSQL (BQ_POSTGRES_URL: scripts/postgres
// start) and a real Artemis (ARTEMIS_URL: scripts/artemis start).

const urnOrder = "urn:babel:orders:created"

func need(t testing.TB) (pgURL, amqpURL string) {
	t.Helper()
	pgURL, amqpURL = os.Getenv("BQ_POSTGRES_URL"), os.Getenv("ARTEMIS_URL")
	if pgURL == "" || amqpURL == "" {
		t.Skip("BQ_POSTGRES_URL or ARTEMIS_URL not set: run eval \"$(scripts/postgres start)\" and eval \"$(scripts/artemis start)\"")
	}
	return pgURL, amqpURL
}

// needDB is the database's URL, for a test that needs no broker.
func needDB(t testing.TB) string {
	t.Helper()
	pgURL := os.Getenv("BQ_POSTGRES_URL")
	if pgURL == "" {
		t.Skip("BQ_POSTGRES_URL not set: run eval \"$(scripts/postgres start)\"")
	}
	return pgURL
}

func token() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testDB is a schema of its own in the test database, migrated.
type testDB struct {
	pool   *pgxpool.Pool
	schema string
	url    string
}

// newDB makes a fresh schema, migrated, and a pool whose search_path is it.
func newDB(t testing.TB) *testDB {
	pgURL := needDB(t)
	schema := "bqt_" + token()
	return openDB(t, pgURL, schema, true)
}

func openDB(t testing.TB, pgURL, schema string, create bool) *testDB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if create {
		conn, err := pgx.Connect(ctx, pgURL)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
		require.NoError(t, err)
		require.NoError(t, conn.Close(ctx))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if conn, err := pgx.Connect(ctx, pgURL); err == nil {
				_, _ = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				_ = conn.Close(ctx)
			}
		})
	}
	cfg, err := pgxpool.ParseConfig(pgURL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	if create {
		require.NoError(t, Migrate(ctx, pool))
	}
	return &testDB{pool: pool, schema: schema, url: pgURL}
}

func (d *testDB) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, d.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func dial(t testing.TB, url string) *artemis.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{url}, &artemis.ClientOptions{DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// newBrokerDB is the set-up of a test of the database and the broker
// together: a fresh schema, the broker's URL and a queue of the test's own.
func newBrokerDB(t testing.TB) (db *testDB, amqpURL, queue string) {
	t.Helper()
	db = newDB(t)
	_, amqpURL = need(t)
	return db, amqpURL, queueName(t)
}

func queueName(t testing.TB) string {
	return "bqpg." + strings.ToLower(strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())) + "." + token()
}

// writeOrders writes n outbox rows to queue, one transaction each, and
// returns their ids in order. group(i) names the group of row i ("" none).
func writeOrders(t testing.TB, db *testDB, queue string, n int, group func(i int) string) []string {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for i := range n {
		tx, err := db.pool.Begin(ctx)
		require.NoError(t, err)
		var opts []BuildOption
		g := ""
		if group != nil {
			g = group(i)
		}
		if g != "" {
			opts = append(opts, WithGroupID(g))
		}
		ids[i], err = Write(ctx, tx, queue, urnOrder, map[string]any{"n": i, "group": g}, opts...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	return ids
}

// drain runs relay rounds until one claims nothing.
func drain(t testing.TB, r *Relay) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ev, err := r.RelayOnce(context.Background())
		require.NoError(t, err)
		if ev.Claimed == 0 {
			return
		}
	}
	t.Fatal("the outbox did not drain in 60 s")
}

// collector consumes a queue and counts deliveries by meta.id.
type collector struct {
	mu          sync.Mutex
	counts      map[string]int
	order       []*artemis.Envelope
	bodies      map[string]string
	traceparent map[string]string
	groups      map[string]string
	received    map[string]time.Time
	total       int
	cancel      context.CancelFunc
	done        chan struct{}
}

func collect(t testing.TB, c *artemis.Client, queue string) *collector {
	t.Helper()
	col := &collector{counts: map[string]int{}, bodies: map[string]string{}, traceparent: map[string]string{}, groups: map[string]string{}, received: map[string]time.Time{}, done: make(chan struct{})}
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrder: func(_ context.Context, env *artemis.Envelope, msg *amqp.Message) error {
		col.mu.Lock()
		defer col.mu.Unlock()
		col.counts[env.Meta.ID]++
		col.total++
		col.order = append(col.order, env)
		if s, ok := msg.Value.(string); ok {
			col.bodies[env.Meta.ID] = s
		}
		col.received[env.Meta.ID] = time.Now()
		if msg.Properties != nil && msg.Properties.GroupID != nil {
			col.groups[env.Meta.ID] = *msg.Properties.GroupID
		}
		if tp, ok := msg.ApplicationProperties["traceparent"].(string); ok {
			col.traceparent[env.Meta.ID] = tp
		}
		return nil
	}}, artemis.WithoutDeadLetter())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	col.cancel = cancel
	go func() {
		defer close(col.done)
		_ = c.Consume(ctx, queue, cons)
	}()
	t.Cleanup(col.stop)
	return col
}

func (c *collector) stop() {
	c.cancel()
	<-c.done
}

// await waits until n deliveries came, then for quiet more (a duplicate
// would come in that time), and returns the count of ids seen more than
// once and of deliveries.
func (c *collector) await(t testing.TB, n int, quiet time.Duration) (dups, total int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		c.mu.Lock()
		total = c.total
		c.mu.Unlock()
		if total >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(quiet)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.counts {
		if k > 1 {
			dups++
		}
	}
	return dups, c.total
}

// requireEach checks that each of ids was delivered exactly once, and
// nothing else.
func (c *collector) requireEach(t testing.TB, ids []string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
		require.Equal(t, 1, c.counts[id], "deliveries of %s", id)
	}
	for id := range c.counts {
		require.True(t, want[id], "unexpected message %s", id)
	}
	require.Equal(t, len(ids), c.total)
}

// proxy is a loopback TCP proxy to the broker that a test can cut (every
// connection closed, new ones refused) and restore.
type proxy struct {
	target string
	ln     net.Listener
	addr   string

	mu    sync.Mutex
	up    bool
	conns []net.Conn
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{target: target, ln: ln, addr: ln.Addr().String(), up: true}
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if !p.up {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		b, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns = append(p.conns, c, b)
		p.mu.Unlock()
		go pipe(c, b)
		go pipe(b, c)
	}
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// cut closes every proxied connection and refuses new ones.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = false
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *proxy) restore() {
	p.mu.Lock()
	p.up = true
	p.mu.Unlock()
}

// url is amqpURL with its host and port replaced by the proxy's.
func (p *proxy) url(t testing.TB, amqpURL string) string {
	t.Helper()
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	u.Host = p.addr
	return u.String()
}

func hostPort(t testing.TB, amqpURL string) string {
	t.Helper()
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	return u.Host
}

// line prints a scenario's result line (go test -v shows it; scripts/test
// greps "^postgres scenario").
func line(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Logf("postgres scenario: %s", fmt.Sprintf(format, args...))
}

// behindProxy is db's schema through a fault proxy of its own in front of
// the server (stalled and healed by the test), and that proxy.
func behindProxy(t testing.TB, db *testDB) (*testDB, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(db.url)
	require.NoError(t, err)
	proxy, err := faultproxy.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	return openDB(t, u.String(), db.schema, false), proxy
}
