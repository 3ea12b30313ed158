package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// What Artemis itself dead-letters (a message that went round
// max-delivery-attempts goes to the address's dead-letter-address, DLQ by
// default) or expires (its time-to-live ran out: expiry-address,
// ExpiryQueue) keeps its body and properties, and gains, as an AMQP
// consumer sees it, message annotations naming where it was
// (_AMQ_ORIG_ADDRESS and _AMQ_ORIG_QUEUE of the core protocol, checked
// against Artemis 2.40):
const (
	annOrigAddress   = "x-opt-ORIG-ADDRESS"    // the address it was sent to
	annOrigQueue     = "x-opt-ORIG-QUEUE"      // the queue it was on
	annOrigMessageID = "x-opt-ORIG-MESSAGE-ID" // the broker's own id of it there (a number)
	annActualExpiry  = "x-opt-ACTUAL-EXPIRY"   // when it expired (Unix ms): expired, not dead-lettered
)

// Reasons the tool gives a message the broker moved (it has no
// dead_letter block of its own to say why).
const (
	reasonUndelivered = "undelivered" // went round max-delivery-attempts
	reasonExpired     = "expired"     // its time-to-live ran out
)

// brokerOrigin notes on r where the broker took msg from, when it did.
func brokerOrigin(msg *amqp.Message, r *record) {
	q, _ := msg.Annotations[annOrigQueue].(string)
	if q == "" {
		return
	}
	addr, _ := msg.Annotations[annOrigAddress].(string)
	r.OrigQueue, r.OrigAddress = q, addr
	if r.OriginalQueue == nil {
		r.OriginalQueue = ptr(q)
	}
	at, expired := annotationMillis(msg.Annotations[annActualExpiry])
	if r.Reason == nil || r.Kind != kindDeadLetter {
		r.Reason = ptr(reasonUndelivered)
		if expired {
			r.Reason = ptr(reasonExpired)
		}
	}
	if expired {
		r.ExpiredAt = ptr(at)
	}
	r.brokerMsgID = fmt.Sprint(msg.Annotations[annOrigMessageID])
}

func annotationMillis(v any) (int64, bool) {
	switch t := v.(type) {
	case int64:
		return t, true
	case time.Time:
		return t.UnixMilli(), true
	}
	return 0, false
}

// brokerTarget is where a message the broker moved goes back to: its
// queue, fully qualified (address::queue) when the queue is not its
// address's namesake, so a copy for one subscription of a multicast
// address does not reach the others.
func brokerTarget(r *record) string {
	if r.OrigAddress == "" || r.OrigAddress == r.OrigQueue {
		return r.OrigQueue
	}
	return r.OrigAddress + "::" + r.OrigQueue
}

// The annotations by which Artemis routes a message over the routing of the
// link it comes on: a JMS producer's destination type and Artemis's
// routing type. A copy that kept a JMS topic publisher's would be routed as
// multicast to the anycast queue it goes back to, dropped there, and
// accepted: a lost message.
const (
	annJMSDest     = "x-opt-jms-dest"
	annRoutingType = "x-opt-routing-type"
)

// brokerCopy is a message the broker moved, as it goes back: the body,
// properties, application properties and annotations as they were,
// less the broker's notes (x-opt-ORIG-*, x-opt-ACTUAL-EXPIRY) and the
// routing annotations (annJMSDest, annRoutingType), with no
// expiry (its time-to-live was used up: a copy that kept it would expire
// again at once), a delivery count of 0, and a duplicate id of its own
// (brokerRedriveID) in place of any it had (Artemis would drop a copy that
// kept the original's: a loss once the record is accepted).
func brokerCopy(src *amqp.Message, r *record, from string, bypass bool) *amqp.Message {
	out := &amqp.Message{
		Format:   src.Format,
		Data:     src.Data,
		Value:    src.Value,
		Sequence: src.Sequence,
		Header:   &amqp.MessageHeader{Durable: true, Priority: 4},
	}
	if h := src.Header; h != nil {
		out.Header.Durable, out.Header.Priority = h.Durable, h.Priority
	}
	if len(src.Annotations) > 0 {
		out.Annotations = amqp.Annotations{}
		for k, v := range src.Annotations {
			if s, ok := k.(string); ok && (strings.HasPrefix(s, "x-opt-ORIG-") || s == annActualExpiry || s == annJMSDest || s == annRoutingType) {
				continue
			}
			out.Annotations[k] = v
		}
	}
	if p := src.Properties; p != nil {
		cp := *p
		cp.AbsoluteExpiryTime, cp.To = nil, nil
		out.Properties = &cp
	}
	out.ApplicationProperties = make(map[string]any, len(src.ApplicationProperties)+2)
	for k, v := range src.ApplicationProperties {
		out.ApplicationProperties[k] = v
	}
	delete(out.ApplicationProperties, replayBypassHeader)
	if bypass {
		out.ApplicationProperties[replayBypassHeader] = "true"
	}
	out.ApplicationProperties[artemis.PropDuplicateID] = brokerRedriveID(from, r)
	return out
}

// brokerRedriveID is the duplicate id of a message the broker moved, as it
// goes back: the same for the same record in every run (a re-run after a
// stop between the publish and the accept is stored once), and new each
// time the broker moves it again (the broker's message id is new each
// time it is sent back).
func brokerRedriveID(from string, r *record) string {
	h := sha256.New()
	exp := ""
	if r.ExpiredAt != nil {
		exp = strconv.FormatInt(*r.ExpiredAt, 10)
	}
	for _, part := range []string{from, r.OrigAddress, r.OrigQueue, r.brokerMsgID, exp} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "bqartemis-redrive-" + hex.EncodeToString(h.Sum(nil)[:16])
}
