// Command outbox is an order service with exactly-once effects on Artemis
// and PostgreSQL: the transactional outbox and the inbox of the postgres
// module.
//
//   - The order service writes each order and its message in one
//     transaction (postgres.Write): an order that rolls back leaves no
//     message, a committed one exactly one.
//
//   - A relay publishes the committed messages, byte for byte, with
//     duplicate detection, and marks them published.
//
//   - The billing consumer charges each order through an inbox: the charge
//     and the inbox record commit together. A delivery that fails after
//     writing its charge rolls back and is retried; a copy of a message
//     delivered again (here: order 1001's stored bytes published a second
//     time, as a redelivery would bring it) is accepted without a second
//     charge.
//
//     cd examples/outbox && go run . [-queue shop.orders] [-schema outbox_example] [-timeout 60s]
//
// The broker is ARTEMIS_URL (default amqp://babel:babel@127.0.0.1:5672),
// the database BQ_POSTGRES_URL (eval "$(scripts/postgres start)" from the
// repository root starts one). The example's tables live in a schema of
// their own (-schema), made afresh on each run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/postgres"
)

// URNPlaced is the URN of the order messages.
const URNPlaced = "urn:babel:shop:order-placed"

// Order is the business payload: the envelope's data object.
type Order struct {
	OrderID     int    `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
}

// The orders the service takes: RolledBack's transaction fails after its
// write; Flaky's first charge fails after writing the charge row;
// Redelivered's message reaches the consumer twice.
var orders = []Order{
	{1001, "ada", 1250}, {1002, "grace", 990}, {1003, "ada", 4200}, {1004, "linus", 1500}, {1005, "grace", 300},
}

// The orders with a part to play (see orders).
const (
	RolledBack  = 1004
	Flaky       = 1002
	Redelivered = 1001
)

// Config is the example's configuration.
type Config struct {
	BrokerURL, DatabaseURL, Queue, Schema string
	Timeout                               time.Duration
}

func main() {
	cfg := Config{BrokerURL: os.Getenv("ARTEMIS_URL"), DatabaseURL: os.Getenv("BQ_POSTGRES_URL")}
	if cfg.BrokerURL == "" {
		cfg.BrokerURL = "amqp://babel:babel@127.0.0.1:5672"
	}
	flag.StringVar(&cfg.Queue, "queue", "shop.orders", "the queue of the order messages")
	flag.StringVar(&cfg.Schema, "schema", "outbox_example", "the PostgreSQL schema of the example's tables (dropped and made afresh)")
	flag.DurationVar(&cfg.Timeout, "timeout", time.Minute, "stop after this long")
	flag.Parse()
	if cfg.DatabaseURL == "" {
		fmt.Fprintln(os.Stderr, "outbox: BQ_POSTGRES_URL is not set (from the repository root: eval \"$(scripts/postgres start)\")")
		os.Exit(2)
	}
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg Config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	pool, err := openSchema(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := artemis.Dial(ctx, []string{cfg.BrokerURL}, nil)
	if err != nil {
		return err
	}
	defer client.Close(context.Background())
	fmt.Fprintf(out, "outbox example: queue %s, schema %s\n", cfg.Queue, cfg.Schema)

	// 1. The order service: an order and its message, one transaction.
	placed := 0
	for _, o := range orders {
		id, err := placeOrder(ctx, pool, cfg.Queue, o)
		switch {
		case errors.Is(err, errStockCheck):
			fmt.Fprintf(out, "order %d  rolled back (%v): no order row, no message\n", o.OrderID, err)
		case err != nil:
			return err
		default:
			placed++
			fmt.Fprintf(out, "order %d  committed with its message %s\n", o.OrderID, id)
		}
	}

	// 2. The relay publishes what committed.
	relay := postgres.NewRelay(pool, client, &postgres.RelayOptions{PollInterval: 200 * time.Millisecond})
	rctx, stopRelay := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = relay.Run(rctx)
	}()
	defer func() {
		stopRelay()
		wg.Wait()
		_ = relay.Close(context.WithoutCancel(ctx))
	}()

	// 3. The billing consumer, through its inbox.
	b := &billing{out: out, charged: make(chan int, 16), duplicates: make(chan string, 4)}
	inbox, err := postgres.NewInbox(pool, "billing", &postgres.InboxOptions{OnDuplicate: b.duplicate})
	if err != nil {
		return err
	}
	cons, err := artemis.NewConsumer(artemis.Handlers{URNPlaced: inbox.Handle(b.charge)},
		// The failed charge comes back 200ms later (the default waits 10s).
		artemis.WithRetryBackoff(artemis.Backoff{Initial: 200 * time.Millisecond, Max: time.Second, Multiplier: 2}),
		artemis.WithOnError(func(_ context.Context, err error, _ *artemis.Envelope, _ *amqp.Message) {
			var de *artemis.DeliveryError
			if errors.As(err, &de) {
				err = de.Err // the handler's own error
			}
			fmt.Fprintf(out, "billing  %v -> rolled back, back on the queue for a retry\n", err)
		}), artemis.WithoutDeadLetter())
	if err != nil {
		return err
	}
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() { consumed <- client.Consume(cctx, cfg.Queue, cons) }()
	defer func() {
		stopConsumer()
		<-consumed
	}()

	for range placed {
		select {
		case <-b.charged:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the charges: %w", ctx.Err())
		}
	}
	fmt.Fprintf(out, "relay    every committed message published (%d)\n", placed)

	// 4. A redelivery: order 1001's message reaches the consumer again.
	if err := redeliver(ctx, pool, client, cfg.Queue, Redelivered); err != nil {
		return err
	}
	select {
	case id := <-b.duplicates:
		fmt.Fprintf(out, "billing  message %s again: already in the inbox, accepted without a second charge\n", id)
	case <-ctx.Done():
		return fmt.Errorf("waiting for the redelivery: %w", ctx.Err())
	}

	var nOrders, nCharges, nMessages int
	err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM shop_orders), (SELECT count(*) FROM shop_charges),
       (SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NOT NULL)`).Scan(&nOrders, &nCharges, &nMessages)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "summary  %d orders, %d messages published, %d charges\n", nOrders, nMessages, nCharges)
	return nil
}

// openSchema makes the example's schema afresh, migrates it and returns a
// pool whose search_path is it.
func openSchema(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("BQ_POSTGRES_URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, pcfg.ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	schema := pgx.Identifier{cfg.Schema}.Sanitize()
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema)
	_ = conn.Close(ctx)
	if err != nil {
		return nil, err
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = cfg.Schema
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	if err = postgres.Migrate(ctx, pool); err == nil {
		_, err = pool.Exec(ctx, `CREATE TABLE shop_orders (id int PRIMARY KEY, customer text NOT NULL, amount_cents int NOT NULL);
CREATE TABLE shop_charges (order_id int NOT NULL, message_id text NOT NULL, amount_cents int NOT NULL)`)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

var errStockCheck = errors.New("out of stock")

// placeOrder writes the order row and its message in one transaction.
func placeOrder(ctx context.Context, pool *pgxpool.Pool, queue string, o Order) (id string, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO shop_orders (id, customer, amount_cents) VALUES ($1, $2, $3)",
			o.OrderID, o.Customer, o.AmountCents); err != nil {
			return err
		}
		var err error
		if id, err = postgres.Write(ctx, tx, queue, URNPlaced, o, postgres.WithGroupID(o.Customer)); err != nil {
			return err
		}
		if o.OrderID == RolledBack {
			return errStockCheck // after both writes: the transaction rolls back, taking the message with it
		}
		return nil
	})
	return id, err
}

// billing charges orders.
type billing struct {
	out        io.Writer
	mu         sync.Mutex
	failedOnce bool
	charged    chan int
	duplicates chan string
}

// charge is the inbox handler: the charge row commits with the inbox record.
func (b *billing) charge(ctx context.Context, tx pgx.Tx, env *artemis.Envelope, _ *amqp.Message) error {
	var o Order
	if err := env.Bind(&o); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO shop_charges (order_id, message_id, amount_cents) VALUES ($1, $2, $3)",
		o.OrderID, env.Meta.ID, o.AmountCents); err != nil {
		return err
	}
	b.mu.Lock()
	fail := o.OrderID == Flaky && !b.failedOnce
	b.failedOnce = b.failedOnce || fail
	b.mu.Unlock()
	if fail {
		return fmt.Errorf("order %d attempt %d: card network timeout after the charge row was written", o.OrderID, env.Attempts)
	}
	fmt.Fprintf(b.out, "billing  order %d charged %d cents (attempt %d)\n", o.OrderID, o.AmountCents, env.Attempts)
	b.charged <- o.OrderID
	return nil
}

func (b *billing) duplicate(env *artemis.Envelope) { b.duplicates <- env.Meta.ID }

// redeliver publishes the stored bytes of an order's message once more,
// without duplicate detection: the broker stores the copy, as it holds a
// message redelivered after a consumer died between its commit and its
// accept.
func redeliver(ctx context.Context, pool *pgxpool.Pool, client *artemis.Client, queue string, orderID int) error {
	var body []byte
	err := pool.QueryRow(ctx, `SELECT body FROM babelqueue_outbox WHERE convert_from(body, 'UTF8')::jsonb -> 'data' ->> 'order_id' = $1`,
		fmt.Sprint(orderID)).Scan(&body)
	if err != nil {
		return err
	}
	pub, err := client.Publisher(ctx, queue)
	if err != nil {
		return err
	}
	defer func() { _ = pub.Close(context.WithoutCancel(ctx)) }()
	r, err := pub.PublishWithReceipt(ctx, artemis.Encoded(body))
	if err != nil {
		return err
	}
	return r.Wait(ctx)
}
