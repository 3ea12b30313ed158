// Connection events: their kinds, their names and log messages (reported by
// client_report.go).

package artemis

import (
	"fmt"
	"time"
)

// ConnectionEventKind says what happened to the Client's connection or to
// one of its links.
type ConnectionEventKind int

// The connection events.
const (
	// EventConnected: the first connection opened, to URL.
	EventConnected ConnectionEventKind = iota + 1
	// EventReconnected: a connection opened again after a loss, to URL.
	EventReconnected
	// EventDisconnected: the connection to URL was lost (Err says why).
	EventDisconnected
	// EventDialFailed: connecting to URL failed (Err says why); the next
	// URL, if any, is tried.
	EventDialFailed
	// EventConsumerAttached: Consume attached its receiver to Address and
	// started listening.
	EventConsumerAttached
	// EventConsumerResumed: Consume re-attached to Address after a loss and
	// resumed listening.
	EventConsumerResumed
	// EventConsumerLost: Consume's receiver on Address failed (Err says
	// why); it will re-attach after a backoff.
	EventConsumerLost
	// EventBackoff: Consume waits Delay before attempt number Attempt to
	// re-attach to Address; Err is the failure that caused it. With an
	// empty Address it is the Client's own wait between two dial rounds
	// (Attempt counts the failed rounds in a row), reported once per step
	// when a publish or a consume loop waits through it.
	EventBackoff
	// EventSenderAttached: a publisher's or a consumer's dead-letter sender
	// attached to Address for the first time.
	EventSenderAttached
	// EventSenderReattached: such a sender attached again after its link or
	// connection was lost.
	EventSenderReattached
	// EventPublishRetried: a publish to Address whose outcome was unknown
	// (Err) is sent again on a new link; it carries a duplicate id, so
	// Artemis stores it once.
	EventPublishRetried
)

// connectionEventNames holds each event kind's name (String) and fixed log
// message (message).
var connectionEventNames = map[ConnectionEventKind]struct{ name, message string }{
	EventConnected:        {"connected", "connected"},
	EventReconnected:      {"reconnected", "reconnected"},
	EventDisconnected:     {"disconnected", "connection lost"},
	EventDialFailed:       {"dial_failed", "dial failed"},
	EventConsumerAttached: {"consumer_attached", "consumer attached"},
	EventConsumerResumed:  {"consumer_resumed", "consumer resumed"},
	EventConsumerLost:     {"consumer_lost", "consumer link lost"},
	EventBackoff:          {"backoff", "backing off"},
	EventSenderAttached:   {"sender_attached", "sender attached"},
	EventSenderReattached: {"sender_reattached", "sender re-attached"},
	EventPublishRetried:   {"publish_retried", "publish retried on a new link"},
}

// String names the event kind.
func (k ConnectionEventKind) String() string {
	if n, ok := connectionEventNames[k]; ok {
		return n.name
	}
	return fmt.Sprintf("ConnectionEventKind(%d)", int(k))
}

// ConnectionEvent is one loss or recovery the Client reports.
type ConnectionEvent struct {
	// Kind says what happened.
	Kind ConnectionEventKind
	// URL is the broker URL concerned, its password replaced by xxxxx ("" when unknown).
	URL string
	// Address is the queue (or dead-letter queue) of a link event.
	Address string
	// Attempt numbers a Consume re-attach attempt (EventBackoff), from 1.
	Attempt int
	// Delay is the wait before that attempt (EventBackoff).
	Delay time.Duration
	// Err is the cause of a loss or failure, passwords scrubbed.
	Err error
}

// message is the fixed log message of an event kind.
func (k ConnectionEventKind) message() string {
	if n, ok := connectionEventNames[k]; ok {
		return n.message
	}
	return k.String()
}
