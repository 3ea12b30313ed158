// Command prometheus exposes the library's publishes and settlements as
// Prometheus metrics on an HTTP /metrics endpoint: the otel module's
// Telemetry is the Observer of the publisher and the consumer, and
// OpenTelemetry's Prometheus exporter serves its instruments from a
// registry of their own.
//
//	cd examples && go run ./prometheus [-listen 127.0.0.1:9464] [-linger 1m]
//
// It publishes five orders and consumes them; the handler of order 1003
// fails every time, so that order is retried twice and then dead-lettered.
// The exporter names the instruments the Prometheus way (dots become
// underscores, a unit and _total are appended) and the attributes become
// labels:
//
//	messaging_client_sent_messages_total{messaging_destination_name,error_type,...}  counter
//	messaging_client_operation_duration_seconds                                      histogram
//	messaging_process_duration_seconds                                               histogram
//	babelqueue_settlements_total{babelqueue_disposition,error_type,...}              counter
//	babelqueue_settlement_duration_seconds                                           histogram
//	babelqueue_retries_total, babelqueue_dead_letters_total                           counters
//
// The URN is not a label: a producer could send any number of them.
// Once every delivery is settled the example scrapes its own endpoint and
// prints the samples of those families, then keeps serving for -linger (0:
// stop at once) so that curl or a Prometheus server can scrape it too.
//
// The broker is ARTEMIS_URL (default amqp://babel:babel@127.0.0.1:5672);
// without -queue a fresh queue name is used.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/workload"
	bqotel "github.com/babelqueue/babelqueue-go-artemis/otel"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
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

func run(ctx context.Context, cfg config, out io.Writer) error {
	reg := prometheus.NewRegistry()
	// One scope, one program: its labels and target_info would only repeat.
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.WithoutCancel(ctx))
	tel, err := bqotel.New(bqotel.Config{MeterProvider: mp})
	if err != nil {
		return err
	}
	url, stop, err := serve(cfg.Listen, reg)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(out, "prometheus example: queue %s, broker %s, metrics at %s\n", cfg.Queue, broker.Redact(cfg.URL), url)

	// tel is the Observer of the publisher and the consumer. cfg.Timeout
	// bounds the run, not the serving after it.
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	err = workload.Run(wctx, cfg.URL, cfg.Queue, tel, out)
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
		if line := sc.Text(); (strings.HasPrefix(line, "babelqueue_") || strings.HasPrefix(line, "messaging_")) &&
			!strings.Contains(line, "_bucket{") {
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
