package brokertest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failBackLog is a backup's log around a fail-back as Artemis 2.40 writes
// it (trimmed): the journal sent to the restarted primary, an accept that
// reached the stopped journal (with its stack trace), the stop, the
// restart as a backup.
const failBackLog = `2026-12-01 13:55:07,980 INFO  [org.apache.activemq.artemis.core.server] AMQ221025: Replication: sending NIOSequentialFile /x/data/journal/activemq-data-75.amq (size=2097152) to replica.
2026-12-01 13:55:08,414 INFO  [org.apache.activemq.artemis.core.server] AMQ221025: Replication: sending NIOSequentialFile /x/data/bindings/activemq-bindings-2.bindings (size=1048576) to replica.
2026-12-01 13:55:09,170 WARN  [org.apache.activemq.artemis.core.server] AMQ222153: Cannot locate record for message id = 6442594642 on Journal
org.apache.activemq.artemis.api.core.ActiveMQShutdownException: Journal must be in state=LOADED, was [STOPPED]
	at org.apache.activemq.artemis.core.journal.impl.JournalImpl.checkJournalIsLoaded(JournalImpl.java:1021)
2026-12-01 13:55:09,390 INFO  [org.apache.activemq.artemis.core.server] AMQ221002: Apache ActiveMQ Artemis Message Broker version 2.40.0 [586f8adf] stopped, uptime 1 minute
2026-12-01 13:55:09,391 INFO  [org.apache.activemq.artemis.core.server] AMQ221039: Restarting as replicating backup server after primary restart
2026-12-01 13:55:12,001 INFO  [org.apache.activemq.artemis.core.server] AMQ221025: Replication: sending NIOSequentialFile /x/late (size=1) to replica.
`

func stamp(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.ParseInLocation(logStamp, s, time.UTC)
	require.NoError(t, err)
	return at
}

func TestParseLog(t *testing.T) {
	lines, err := parseLog(strings.NewReader(failBackLog), time.Time{}, time.UTC)
	require.NoError(t, err)
	require.Len(t, lines, 6, "the stack trace's two lines are not log lines")
	assert.Equal(t, stamp(t, "2026-12-01 13:55:07,980"), lines[0].At)
	assert.Equal(t, 980*time.Millisecond, time.Duration(lines[0].At.Nanosecond()), "milliseconds after the comma")
	assert.Contains(t, lines[2].Text, "AMQ222153")

	lines, err = parseLog(strings.NewReader(failBackLog), stamp(t, "2026-12-01 13:55:09,390"), time.UTC)
	require.NoError(t, err)
	require.Len(t, lines, 3, "a line stamped at since is kept, earlier ones are not")
	assert.Contains(t, lines[0].Text, "AMQ221002")

	loc := time.FixedZone("UTC+2", 2*3600)
	lines, err = parseLog(strings.NewReader(failBackLog), time.Time{}, loc)
	require.NoError(t, err)
	assert.Equal(t, stamp(t, "2026-12-01 11:55:07,980"), lines[0].At.UTC(), "stamps are read in the zone given")
}

func TestParseLogLongLine(t *testing.T) {
	long := "2026-12-01 13:55:07,980 INFO  " + strings.Repeat("x", 1<<20) + "\n2026-12-01 13:55:08,000 INFO  after\n"
	lines, err := parseLog(strings.NewReader(long), time.Time{}, time.UTC)
	require.NoError(t, err)
	require.Len(t, lines, 2, "a 1 MiB line (a large message's trace) does not stop the reader")
	assert.True(t, strings.HasSuffix(lines[1].Text, "after"))
}

func TestBrokerLog(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "log"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "log", "artemis.log"), []byte(failBackLog), 0o600))
	b := &Broker{InstanceDir: dir, URL: "amqp://babel:secret@127.0.0.1:5672"}
	lines, err := b.Log(time.Time{})
	require.NoError(t, err)
	assert.Len(t, lines, 6)

	_, err = (&Broker{URL: "amqp://babel:secret@127.0.0.1:5672"}).Log(time.Time{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no instance directory")
	assert.NotContains(t, err.Error(), "secret", "no password in an error")

	_, err = (&Broker{InstanceDir: filepath.Join(dir, "missing")}).Log(time.Time{})
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestHandBackStart(t *testing.T) {
	lines, err := parseLog(strings.NewReader(failBackLog), time.Time{}, time.UTC)
	require.NoError(t, err)
	at, found, err := handBackStart(lines)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, stamp(t, "2026-12-01 13:55:08,414"), at, "the last file sent before the restart as a backup, not the one after")

	_, found, err = handBackStart(lines[:4])
	require.NoError(t, err)
	assert.False(t, found, "no AMQ221039 yet: not found, no error")

	_, _, err = handBackStart(lines[2:])
	require.Error(t, err, "AMQ221039 without a journal sent before it")
	assert.Contains(t, err.Error(), "AMQ221025")
}
