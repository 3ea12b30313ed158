package brokertest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// logStamp is the time stamp that starts each line of an Artemis log
// (log4j2 "%d": local time, milliseconds after a comma).
const logStamp = "2006-01-02 15:04:05,000"

// LogLine is one line of a broker's log: its time stamp and its text
// (the whole line).
type LogLine struct {
	At   time.Time
	Text string
}

// LogPath is the broker's log file: log/artemis.log in its instance.
func (b *Broker) LogPath() string { return filepath.Join(b.InstanceDir, "log", "artemis.log") }

// Log returns the lines of the broker's log stamped at or after since, in
// file order. Lines without a stamp (a stack trace's, a message's second
// line) are left out.
func (b *Broker) Log(since time.Time) ([]LogLine, error) {
	if b.InstanceDir == "" {
		return nil, fmt.Errorf("brokertest: no instance directory for the broker at %s: its log cannot be read", redactURL(b.URL))
	}
	f, err := os.Open(b.LogPath())
	if err != nil {
		return nil, fmt.Errorf("brokertest: the broker's log: %w", err)
	}
	defer func() { _ = f.Close() }()
	return parseLog(f, since, time.Local)
}

// parseLog reads a log from r: the lines stamped (in loc) at or after
// since. The JVM and the tests share the machine's clock and zone.
func parseLog(r io.Reader, since time.Time, loc *time.Location) ([]LogLine, error) {
	var lines []LogLine
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		text := sc.Text()
		if len(text) < len(logStamp) {
			continue
		}
		at, err := time.ParseInLocation(logStamp, text[:len(logStamp)], loc)
		if err != nil || at.Before(since) {
			continue
		}
		lines = append(lines, LogLine{At: at, Text: text})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("brokertest: reading the broker's log: %w", err)
	}
	return lines, nil
}
