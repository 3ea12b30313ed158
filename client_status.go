// The Client's health for a readiness probe, kept from its connection
// events.

package artemis

import (
	"time"
)

// ClientStatus is a snapshot of a Client's connection, for a readiness or
// liveness probe.
type ClientStatus struct {
	// Connected reports whether a connection is open now: dialled, not
	// known to be lost, and the Client not closed.
	Connected bool
	// URL is the broker URL of the open connection, or of the last one,
	// its password replaced by xxxxx ("" before the first connection).
	URL string
	// LastError is the last connection failure, a failed dial or a loss,
	// passwords scrubbed; ErrClosed once the Client is closed; nil while
	// nothing has failed. It is kept after a reconnect, as the reason for
	// the last outage.
	LastError error
	// Since is when Connected last changed: the time of the connection,
	// or of the loss or the first failed dial that left the Client without
	// one. Zero before the first dial ended.
	Since time.Time
	// Members is, for a Client from DialCluster, each member's status in
	// the order of DialCluster's nodes (nil for Dial's). Connected is then
	// true while at least one member is connected; URL is the first
	// connected member's, LastError the first member's that has one, and
	// Since the latest change of any member.
	Members []ClientStatus
}

// track records an event that changes the connection's health. ev is
// already scrubbed.
func (c *brokerClient) track(ev ConnectionEvent) {
	switch ev.Kind {
	case EventConnected, EventReconnected, EventDisconnected, EventDialFailed:
	default:
		return
	}
	now := c.now()
	h := &c.health
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Kind {
	case EventConnected, EventReconnected:
		if !h.connected || h.since.IsZero() {
			h.since = now
		}
		h.connected, h.url = true, ev.URL
	case EventDisconnected:
		if h.connected || h.since.IsZero() {
			h.since = now
		}
		h.connected, h.url, h.lastErr = false, ev.URL, ev.Err
	case EventDialFailed:
		if h.since.IsZero() {
			h.since = now
		}
		h.lastErr = ev.Err
	}
}

// status is Status for a Client on one broker (a cluster's member).
func (c *brokerClient) status() ClientStatus {
	// Both read under c.mu: a connection's change and its tracking happen
	// under it together (see drop and runDial), so the health read here is
	// that of cn, never of a connection dropped and re-dialled in between.
	c.mu.Lock()
	cn, closed := c.cur, c.closed
	h := &c.health
	h.mu.Lock()
	s := ClientStatus{Connected: h.connected, URL: h.url, LastError: h.lastErr, Since: h.since}
	h.mu.Unlock()
	c.mu.Unlock()
	switch {
	case closed:
		s.Connected, s.LastError = false, ErrClosed
	case cn == nil || cn.dead():
		s.Connected = false
	default:
		s.URL = cn.url
	}
	return s
}
