package brokertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CLITimeout bounds one run of the Artemis CLI. Each run starts a JVM,
// which takes a few seconds on a loaded machine.
const CLITimeout = 90 * time.Second

// cliPath is the instance's bin/artemis (which knows its instance), else
// the distribution's.
func (b *Broker) cliPath() string {
	for _, dir := range []string{b.InstanceDir, b.Home} {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "bin", "artemis")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// HasCLI reports whether the Artemis CLI can be run.
func (b *Broker) HasCLI() bool { return b.CoreURL != "" && b.cliPath() != "" }

// RequireCLI skips the test when the Artemis CLI cannot be run: it needs
// ARTEMIS_CORE_URL and ARTEMIS_INSTANCE_DIR or ARTEMIS_HOME (scripts/test
// exports them when it starts the broker).
func (b *Broker) RequireCLI(t testing.TB) {
	t.Helper()
	if !b.HasCLI() {
		t.Skip("JMS test skipped: the Artemis CLI needs ARTEMIS_CORE_URL and ARTEMIS_INSTANCE_DIR " +
			"or ARTEMIS_HOME (scripts/artemis env prints them)")
	}
}

// CLI runs `artemis <command> <args...>` with the broker's --url, --user
// and --password, and returns its standard output. command may be two
// words ("queue stat"); the options go after it.
func (b *Broker) CLI(ctx context.Context, command string, args ...string) (string, error) {
	path := b.cliPath()
	if path == "" {
		return "", errors.New("no Artemis CLI: set ARTEMIS_INSTANCE_DIR or ARTEMIS_HOME")
	}
	ctx, cancel := context.WithTimeout(ctx, CLITimeout)
	defer cancel()
	full := append(strings.Fields(command), "--url", b.CoreURL, "--user", b.User, "--password", b.Password)
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, path, full...)
	cmd.WaitDelay = 5 * time.Second
	// Java 17 takes the encoding of argv and stdout from the locale: make
	// it UTF-8, so non-ASCII bodies survive both ways.
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("artemis %s: %w\nstdout:\n%s\nstderr:\n%s", command, err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// Browsed is one message as `artemis browser --verbose` shows it: the JMS
// view of the message.
type Browsed struct {
	// Text is the TextMessage body; empty when the message is not a
	// TextMessage (the CLI then prints its JMSMessageID instead). The CLI
	// prints the text on one line, so a text with a line break, or one
	// starting with "ID:", is not read right; envelopes never are either.
	Text string
	// IsText reports whether the message is a JMS TextMessage.
	IsText bool
	// Dump is the CLI's rendering of the whole message.
	Dump string
	// Properties are the message's properties as the CLI renders them.
	// Artemis keeps JMSType and JMSCorrelationID among them.
	Properties map[string]string
}

// Browse lists the messages of a queue without consuming them, through the
// CLI's JMS QueueBrowser.
//
// `artemis browser --verbose` prints, per message, a line
// "<thread> browsing <text>" (the TextMessage's getText(), else the
// JMSMessageID) followed by "...<the message's toString()>", which ends in
// "properties=TypedProperties[k=v, k=v, ...]]".
//
// filter, when not empty, is a JMS selector: the browser sees only the
// messages it matches.
func (b *Broker) Browse(ctx context.Context, queue, filter string) ([]Browsed, error) {
	args := []string{"--destination", "queue://" + queue, "--verbose"}
	if filter != "" {
		args = append(args, "--filter", filter)
	}
	out, err := b.CLI(ctx, "browser", args...)
	if err != nil {
		return nil, err
	}
	return parseBrowse(out), nil
}

func parseBrowse(out string) []Browsed {
	var msgs []Browsed
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimRight(line, "\r")
		if i := strings.Index(line, " browsing "); i >= 0 && strings.HasPrefix(line, "Consumer ") {
			v := line[i+len(" browsing "):]
			m := Browsed{Properties: map[string]string{}}
			if !strings.HasPrefix(v, "ID:") {
				m.Text, m.IsText = v, true
			}
			msgs = append(msgs, m)
			continue
		}
		if strings.HasPrefix(line, "...") && len(msgs) > 0 {
			last := &msgs[len(msgs)-1]
			last.Dump = line[3:]
			last.Properties = parseTypedProperties(line)
		}
	}
	return msgs
}

// parseTypedProperties reads "properties=TypedProperties[k=v, k=v]" from
// a message dump. A value that itself contains ", " is cut there; the
// contract's properties never do.
func parseTypedProperties(dump string) map[string]string {
	props := map[string]string{}
	const open = "properties=TypedProperties["
	i := strings.Index(dump, open)
	if i < 0 {
		return props
	}
	body := dump[i+len(open):]
	body = strings.TrimSuffix(body, "]]")
	for _, kv := range strings.Split(body, ", ") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			props[k] = v
		}
	}
	return props
}

// Property is a JMS message property for Produce.
type Property struct {
	Type  string `json:"type"` // string, int, long, boolean ...
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Produce sends one JMS TextMessage with body text and the given
// properties to queue, through `artemis producer`. A property named
// JMSType or JMSCorrelationID lands in that JMS header: Artemis keeps the
// headers as properties of those names.
func (b *Broker) Produce(ctx context.Context, queue, text string, props []Property) error {
	args := []string{"--destination", "queue://" + queue, "--message-count", "1", "--message", text}
	if len(props) > 0 {
		js, err := json.Marshal(props)
		if err != nil {
			return err
		}
		args = append(args, "--properties", string(js))
	}
	out, err := b.CLI(ctx, "producer", args...)
	if err != nil {
		return err
	}
	if !strings.Contains(out, "Produced: 1 messages") {
		return fmt.Errorf("artemis producer did not report one message produced:\n%s", out)
	}
	return nil
}

// QueueStat is the broker's counters for one queue, from `artemis queue
// stat --json`.
type QueueStat struct {
	MessageCount    int
	DeliveringCount int
	ScheduledCount  int
	MessagesAdded   int
	MessagesAcked   int
	ConsumerCount   int
}

// Stat returns the broker's counters for queue, through `artemis queue
// stat`.
func (b *Broker) Stat(ctx context.Context, queue string) (QueueStat, error) {
	out, err := b.CLI(ctx, "queue stat", "--json", "--field", "NAME", "--operation", "EQUALS", "--value", queue)
	if err != nil {
		return QueueStat{}, err
	}
	return parseStat(out, queue)
}

// parseStat reads {"data":[{"name":"q","messageCount":"3",...}],"count":1};
// every value is a string.
func parseStat(out, queue string) (QueueStat, error) {
	start := strings.Index(out, "{")
	if start < 0 {
		return QueueStat{}, fmt.Errorf("queue stat: no JSON in:\n%s", out)
	}
	var doc struct {
		Data []map[string]string `json:"data"`
	}
	if err := json.Unmarshal([]byte(out[start:]), &doc); err != nil {
		return QueueStat{}, fmt.Errorf("queue stat: %w in:\n%s", err, out)
	}
	for _, row := range doc.Data {
		if row["name"] != queue {
			continue
		}
		var s QueueStat
		for _, f := range []struct {
			name string
			dst  *int
		}{
			{"messageCount", &s.MessageCount},
			{"deliveringCount", &s.DeliveringCount},
			{"scheduledCount", &s.ScheduledCount},
			{"messagesAdded", &s.MessagesAdded},
			{"messagesAcked", &s.MessagesAcked},
			{"consumerCount", &s.ConsumerCount},
		} {
			n, err := strconv.Atoi(row[f.name])
			if err != nil {
				return QueueStat{}, fmt.Errorf("queue stat: %s of %s: %w", f.name, queue, err)
			}
			*f.dst = n
		}
		return s, nil
	}
	return QueueStat{}, fmt.Errorf("queue stat: no row for %s in:\n%s", queue, out)
}
