package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

// DefaultURL is the broker of `scripts/artemis start`.
const DefaultURL = "amqp://babel:babel@127.0.0.1:5672"

// URL returns ARTEMIS_URL, or DefaultURL when it is not set.
func URL() string {
	if u := os.Getenv("ARTEMIS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Config is the part of its configuration every example shares: the
// broker, the queue, and how long the run may take.
type Config struct {
	URL     string
	Queue   string
	Timeout time.Duration
}

// Flags are the defaults and the help texts of -queue and -timeout.
type Flags struct {
	// Queue is the default of -queue; "" means a fresh <name>-<random>
	// queue for each run.
	Queue string
	// QueueHelp is the help of -queue; "" means the help of a fresh queue.
	QueueHelp string
	// Timeout is the default of -timeout.
	Timeout time.Duration
	// TimeoutHelp is the help of -timeout; "" means "give up after this
	// long".
	TimeoutHelp string
}

// Main is every example's main. It fills cfg from ARTEMIS_URL (see URL)
// and the flags -queue and -timeout, parsing them with any flag the
// example registered on flag.CommandLine before. Then it calls run with
// the standard output and a context that Ctrl-C cancels; when run fails,
// it prints the error after the example's name and exits with status 1.
func Main(name string, cfg *Config, f Flags, run func(ctx context.Context, out io.Writer) error) {
	if f.QueueHelp == "" {
		f.QueueHelp = fmt.Sprintf("the queue (default: a fresh %s-<random> queue)", name)
	}
	if f.TimeoutHelp == "" {
		f.TimeoutHelp = "give up after this long"
	}
	cfg.URL = URL()
	flag.StringVar(&cfg.Queue, "queue", f.Queue, f.QueueHelp)
	flag.DurationVar(&cfg.Timeout, "timeout", f.Timeout, f.TimeoutHelp)
	flag.Parse()
	if cfg.Queue == "" {
		cfg.Queue = name + "-" + RandomHex(4)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// RandomHex returns n random bytes in hex, for fresh queue names and ids.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
