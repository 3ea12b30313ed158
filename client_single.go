// The Client on one broker, as the Client's backend (and as a cluster's
// member): its publisher's sender, and whether it is connected now. Its
// state is in client_options.go, its Consume in client_consume.go, its
// Status in client_status.go.

package artemis

import "context"

// publishLink is what a ClientPublisher sends through and closes: one
// broker's reconnecting sender (clientSender), or a cluster's
// (clusterSender).
type publishLink interface {
	Sender
	close(ctx context.Context) error
}

// publishSender attaches a reconnecting sender to queue (a topic's
// multicast address when topic is set), waiting for the connection within
// ctx unless the Client fails fast.
func (c *brokerClient) publishSender(ctx context.Context, queue string, topic bool) (publishLink, error) {
	s := c.newSender(queue)
	s.topic = topic
	if _, err := s.link(ctx, !c.failFast); err != nil {
		return nil, err
	}
	return s, nil
}

// up reports an open connection that is not known dead (a cluster sends
// an unkeyed message to a member that is up).
func (c *brokerClient) up() bool {
	c.mu.Lock()
	cn := c.cur
	c.mu.Unlock()
	return cn != nil && !cn.dead() && cn.lost.Err() == nil
}
