package postgres

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Schema is the migration that creates the outbox and inbox tables: the
// file schema.sql of this module, for a migration tool of your own. It is
// idempotent.
//
//go:embed schema.sql
var Schema string

// migrateLock is the advisory lock key Migrate holds, so that processes
// starting together apply the schema one after the other.
const migrateLock = 0x62710001 // "bq" 0001

// Beginner starts a transaction: a *pgxpool.Pool, a *pgx.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrate applies Schema in one transaction, in the first schema of the
// connection's search_path. It may run any number of times, from several
// processes at once.
func Migrate(ctx context.Context, db Beginner) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("babelqueue/postgres: migrate: %w", err)
	}
	defer func() { _ = rollbackTx(ctx, tx) }()
	if _, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
		return fmt.Errorf("babelqueue/postgres: migrate: %w", err)
	}
	if _, err = tx.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("babelqueue/postgres: migrate: %w", err)
	}
	if err = tx.Commit(ctx); err != nil {
		return fmt.Errorf("babelqueue/postgres: migrate: %w", err)
	}
	return nil
}
