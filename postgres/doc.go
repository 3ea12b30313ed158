// Package postgres gives BabelQueue services on Artemis exactly-once
// effects with PostgreSQL: a transactional outbox (Write, WriteEnvelope and
// a Relay), so that a message goes out if and only if the business
// transaction that wrote it committed, and an inbox (Inbox), so that a
// handler's database effect happens once per meta.id however often the
// message is delivered.
//
// The tables are created by Migrate, or by applying Schema (schema.sql)
// with a migration tool of your own.
//
// The outbox stores the envelope's canonical encoding; the Relay publishes
// those bytes unchanged, with Artemis duplicate detection (_AMQ_DUPL_ID =
// meta.id), and marks each row published once the broker accepted it. A
// relay that dies between the broker's acceptance and the mark publishes
// the row again when it (or another relay) comes back, and the broker
// drops the copy, as long as the id is still in the address's duplicate-id
// cache (Artemis: the last 20,000 ids per address by default). The inbox
// makes the consumer's effect once per meta.id whatever reaches it.
package postgres
