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
	"time"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/workload"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type config struct {
	broker.Config        // its Timeout bounds the run, not the -linger
	Listen        string // the /metrics address, on loopback
	Linger        time.Duration
	// Serving, when set, is called with the /metrics URL once every
	// delivery is settled, while the endpoint still serves (a test scrapes
	// it there).
	Serving func(metricsURL string)
}

func main() {
	var cfg config
	flag.StringVar(&cfg.Listen, "listen", "127.0.0.1:9464", "serve /metrics on this address")
	flag.DurationVar(&cfg.Linger, "linger", 0, "keep serving /metrics this long after the run (Ctrl-C stops it)")
	broker.Main("prometheus", &cfg.Config, broker.Flags{Timeout: time.Minute, TimeoutHelp: "give up on the run after this long"},
		func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
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
	m.settled.WithLabelValues(ev.Queue, disp, ev.Kind.String()).Inc()
	m.settleTime.WithLabelValues(ev.Queue, disp).Observe(ev.Latency.Seconds())
	if ev.Handler > 0 {
		m.handlerTime.WithLabelValues(ev.Queue).Observe(ev.Handler.Seconds())
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

	// The hooks: metrics is the Observer of the publisher and the
	// consumer. cfg.Timeout bounds the run, not the serving after it.
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	err = workload.Run(wctx, cfg.URL, cfg.Queue, metrics, out)
	cancel()
	if err != nil {
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
