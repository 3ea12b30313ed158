// Command prometheus exposes the library's publishes and settlements as
// Prometheus metrics on an HTTP /metrics endpoint, through the library's
// Observer hook: no handler is wrapped, and the library itself does not
// import the Prometheus client.
//
//	cd examples && go run ./prometheus [-listen 127.0.0.1:9464] [-linger 1m]
//
// It publishes five orders and consumes them; the handler of order 1003
// fails every time, so that order is retried twice and then dead-lettered.
// The metrics, on a registry of their own:
//
//	babelqueue_publishes_total{queue,outcome}                 counter
//	babelqueue_publish_duration_seconds{queue}                histogram
//	babelqueue_settlements_total{queue,disposition,kind}      counter (kind "" on success)
//	babelqueue_settlement_duration_seconds{queue,disposition} histogram
//	babelqueue_handler_duration_seconds{queue}                histogram
//
// The URN is not a label: a producer could send any number of them.
// Once every delivery is settled the example scrapes its own endpoint and
// prints the babelqueue_ samples, then keeps serving for -linger (0: stop
// at once) so that curl or a Prometheus server can scrape it too.
//
// The broker is ARTEMIS_URL (default amqp://babel:babel@127.0.0.1:5672);
// without -queue a fresh queue name is used.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// URNCreated is the URN of the orders.
const URNCreated = "urn:babel:orders:created"

// FailingOrder is the order whose handler fails every time.
const FailingOrder = 1003

// Orders is how many orders are published (1001 ...).
const Orders = 5

// MaxTries is how many deliveries a failing order gets.
const MaxTries = 3

// Settlements is how many settlements the run makes: every order but one
// accepted, the failing one abandoned MaxTries-1 times, then dead-lettered.
const Settlements = Orders - 1 + MaxTries

type config struct {
	URL     string
	Queue   string
	Listen  string // the /metrics address, on loopback
	Linger  time.Duration
	Timeout time.Duration
	// Serving, when set, is called with the /metrics URL once every
	// delivery is settled, while the endpoint still serves (a test scrapes
	// it there).
	Serving func(metricsURL string)
}

func main() {
	cfg := config{URL: broker.URL()}
	flag.StringVar(&cfg.Queue, "queue", "", "the queue (default: a fresh prometheus-<random> queue)")
	flag.StringVar(&cfg.Listen, "listen", "127.0.0.1:9464", "serve /metrics on this address")
	flag.DurationVar(&cfg.Linger, "linger", 0, "keep serving /metrics this long after the run (Ctrl-C stops it)")
	flag.DurationVar(&cfg.Timeout, "timeout", time.Minute, "give up on the run after this long")
	flag.Parse()
	if cfg.Queue == "" {
		cfg.Queue = "prometheus-" + broker.RandomHex(4)
	}

	broker.Main("prometheus", func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
}

// Metrics is an artemis.Observer that updates Prometheus collectors. The
// collectors are safe for concurrent use and never block, as an Observer
// must be.
type Metrics struct {
	publishes   *prometheus.CounterVec
	publishTime *prometheus.HistogramVec
	settled     *prometheus.CounterVec
	settleTime  *prometheus.HistogramVec
	handlerTime *prometheus.HistogramVec
}

// NewMetrics makes the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "babelqueue_publishes_total", Help: "Publishes, by outcome (accepted, not_accepted, unknown, error).",
		}, []string{"queue", "outcome"}),
		publishTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "babelqueue_publish_duration_seconds", Help: "Time from the projection of a message to the broker's outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}, []string{"queue"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "babelqueue_settlements_total", Help: "Deliveries settled, by disposition and error kind (empty on success).",
		}, []string{"queue", "disposition", "kind"}),
		settleTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "babelqueue_settlement_duration_seconds", Help: "Time from the handler's start to the settlement's end.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}, []string{"queue", "disposition"}),
		handlerTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "babelqueue_handler_duration_seconds", Help: "Time the handler took.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8),
		}, []string{"queue"}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.publishes, m.publishTime, m.settled, m.settleTime, m.handlerTime} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}

// Published implements artemis.Observer.
func (m *Metrics) Published(ev artemis.PublishEvent) {
	m.publishes.WithLabelValues(ev.Queue, ev.Outcome.String()).Inc()
	m.publishTime.WithLabelValues(ev.Queue).Observe(ev.Duration.Seconds())
}

// Settled implements artemis.Observer.
func (m *Metrics) Settled(ev artemis.SettleEvent) {
	disp := ev.Disposition.String()
	m.settled.WithLabelValues(ev.Queue, disp, ev.KindName()).Inc()
	m.settleTime.WithLabelValues(ev.Queue, disp).Observe(ev.Latency.Seconds())
	if ev.Handler > 0 {
		m.handlerTime.WithLabelValues(ev.Queue).Observe(ev.Handler.Seconds())
	}
}

// counting passes every event on to an Observer and closes done once n
// settlements were heard: how the example knows the queue is through.
type counting struct {
	artemis.Observer
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (c *counting) Settled(ev artemis.SettleEvent) {
	c.Observer.Settled(ev)
	if c.n.Add(1) == c.want {
		close(c.done)
	}
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		return err
	}
	url, stop, err := serve(cfg.Listen, reg)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(out, "prometheus example: queue %s, broker %s, metrics at %s\n", cfg.Queue, broker.Redact(cfg.URL), url)

	if err := work(ctx, cfg, metrics, out); err != nil {
		return err
	}
	body, err := scrape(ctx, url)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "babelqueue_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	if cfg.Serving != nil {
		cfg.Serving(url)
	}
	if cfg.Linger > 0 {
		fmt.Fprintf(out, "serving %s for %v (Ctrl-C stops)\n", url, cfg.Linger)
		select {
		case <-time.After(cfg.Linger):
		case <-ctx.Done():
		}
	}
	return nil
}

// work publishes the orders and consumes them until every delivery is
// settled, with one Observer on both sides.
func work(ctx context.Context, cfg config, metrics *Metrics, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	obs := &counting{Observer: metrics, want: Settlements, done: make(chan struct{})}
	client, pub, err := broker.Connect(ctx, cfg.URL, cfg.Queue, artemis.WithPublishObserver(obs))
	if err != nil {
		return err
	}
	defer client.Close()
	handle := func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		var order struct {
			ID int `json:"order_id"`
		}
		if err := env.Bind(&order); err != nil {
			return err
		}
		if order.ID == FailingOrder {
			return fmt.Errorf("order %d: payment gateway timeout", order.ID)
		}
		return nil
	}
	// No WithOnError and no WithLogger: the failures are also logged, at
	// warn, to slog.Default() (standard error).
	cons, err := broker.Consume(ctx, client, cfg.Queue, artemis.Handlers{URNCreated: handle},
		artemis.WithMaxTries(MaxTries), artemis.WithObserver(obs))
	if err != nil {
		return err
	}
	for i := range Orders {
		if _, err := pub.Publish(ctx, URNCreated, map[string]int{"order_id": 1001 + i}); err != nil {
			_ = cons.Stop()
			return err
		}
	}
	fmt.Fprintf(out, "published %d orders; order %d fails every time\n", Orders, FailingOrder)
	select {
	case <-obs.done:
	case err := <-cons.Done():
		return broker.Early(err)
	case <-ctx.Done():
		_ = cons.Stop()
		return fmt.Errorf("gave up after %d of %d settlements: %w", obs.n.Load(), Settlements, ctx.Err())
	}
	if err := cons.Stop(); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d settlements observed\n", obs.n.Load())
	return nil
}

// serve starts the /metrics endpoint on addr, which must be a loopback
// address, and returns its URL and the function that stops it.
func serve(addr string, reg *prometheus.Registry) (string, func(), error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("-listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", nil, fmt.Errorf("-listen %q: want a loopback address such as 127.0.0.1:9464", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return "http://" + ln.Addr().String() + "/metrics", stop, nil
}

// scrape reads url as Prometheus would.
func scrape(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
