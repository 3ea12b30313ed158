package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/Azure/go-amqp"
)

// Artemis's management over AMQP: a request is a message to the
// management address whose application properties name the resource
// (_AMQ_ResourceName: "broker", "queue.<name>") and an attribute
// (_AMQ_Attribute) or an operation (_AMQ_OperationName, its parameters a
// JSON array in the body). The reply goes to the request's reply-to, here
// a dynamic (temporary) queue; its correlation-id is the request's
// message-id, _AMQ_OperationSucceeded says whether it worked, and the body
// is a JSON array holding the result (or the error text).
const (
	managementAddress = "activemq.management"
	propResource      = "_AMQ_ResourceName"
	propAttribute     = "_AMQ_Attribute"
	propOperation     = "_AMQ_OperationName"
	propSucceeded     = "_AMQ_OperationSucceeded"
)

// queueStat is one row of stats.
type queueStat struct {
	Queue      string `json:"queue"`
	Messages   int64  `json:"messages"`
	Consumers  int64  `json:"consumers"`
	Delivering int64  `json:"delivering"`
	Scheduled  int64  `json:"scheduled"`
	Added      int64  `json:"added"`
	Address    string `json:"address"` // the address the queue is bound to
	Routing    string `json:"routing"` // "anycast", or "multicast" for a topic's subscription
	Durable    bool   `json:"durable"`
	// DLQ is, for a topic's subscription (stats -address), its
	// dead-letter queue <subscription>.dlq when the broker has it.
	DLQ       *queueStat `json:"dlq,omitempty"`
	temporary bool
}

// The queue attributes stats reads, and where each goes.
var statAttributes = []struct {
	name string
	dst  func(*queueStat) *int64
}{
	{"MessageCount", func(s *queueStat) *int64 { return &s.Messages }},
	{"ConsumerCount", func(s *queueStat) *int64 { return &s.Consumers }},
	{"DeliveringCount", func(s *queueStat) *int64 { return &s.Delivering }},
	{"ScheduledCount", func(s *queueStat) *int64 { return &s.Scheduled }},
	{"MessagesAdded", func(s *queueStat) *int64 { return &s.Added }},
}

// manager does request/reply on the management address.
type manager struct {
	snd   managerSender
	rcv   managerReceiver
	reply string
	seq   int
}

func newManager(ctx context.Context, s *session) (*manager, error) {
	rcv, err := s.sess.NewReceiver(ctx, "", &amqp.ReceiverOptions{DynamicAddress: true, Credit: 50})
	if err != nil {
		return nil, fmt.Errorf("attach a reply receiver: %w", err)
	}
	snd, err := s.sess.NewSender(ctx, managementAddress, nil)
	if err != nil {
		_ = rcv.Close(ctx)
		return nil, fmt.Errorf("attach a sender to %s: %w", managementAddress, err)
	}
	return &manager{snd: snd, rcv: rcv, reply: rcv.Address()}, nil
}

// managerSender and managerReceiver are what a manager uses of its
// go-amqp links.
type managerSender interface {
	Send(ctx context.Context, msg *amqp.Message, opts *amqp.SendOptions) error
	Close(ctx context.Context) error
}

type managerReceiver interface {
	Receive(ctx context.Context, opts *amqp.ReceiveOptions) (*amqp.Message, error)
	AcceptMessage(ctx context.Context, msg *amqp.Message) error
	Close(ctx context.Context) error
}

// closeTimeout bounds the detach of a manager's links and the close of a
// connection (session.Close): a broker that never answers must not keep
// the command from exiting.
var closeTimeout = 5 * time.Second

// close detaches the manager's links, within closeTimeout of its
// own (ctx is usually the command's, cancelled or not: its values only).
func (m *manager) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	_ = m.snd.Close(ctx)
	_ = m.rcv.Close(ctx)
}

// request is one management call: an attribute read, or an operation with
// its parameters.
type request struct {
	resource  string
	attribute string
	operation string
	params    []any
}

// call sends every request, then collects the replies by correlation-id,
// so a queue's attributes take one round trip. results[i] is the JSON of
// the first element of reply i's array.
func (m *manager) call(ctx context.Context, reqs []request) ([]json.RawMessage, error) {
	ids := make(map[string]int, len(reqs))
	for i, rq := range reqs {
		m.seq++
		id := "bqartemis-" + strconv.Itoa(m.seq)
		ids[id] = i
		props := map[string]any{propResource: rq.resource}
		if rq.attribute != "" {
			props[propAttribute] = rq.attribute
		} else {
			props[propOperation] = rq.operation
		}
		params := rq.params
		if params == nil {
			params = []any{}
		}
		body, err := json.Marshal(params)
		if err != nil {
			return nil, err
		}
		reply := m.reply
		msg := &amqp.Message{
			Properties:            &amqp.MessageProperties{MessageID: id, ReplyTo: &reply},
			ApplicationProperties: props,
			Value:                 string(body),
		}
		if err := m.snd.Send(ctx, msg, nil); err != nil {
			return nil, fmt.Errorf("send a management request: %w", err)
		}
	}
	results := make([]json.RawMessage, len(reqs))
	var first error
	for left := len(reqs); left > 0; {
		msg, err := m.rcv.Receive(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("wait for a management reply: %w", err)
		}
		_ = m.rcv.AcceptMessage(ctx, msg)
		var corr string
		if msg.Properties != nil && msg.Properties.CorrelationID != nil {
			corr = fmt.Sprint(msg.Properties.CorrelationID)
		}
		i, ok := ids[corr]
		if !ok {
			continue // a late reply to an earlier call
		}
		delete(ids, corr)
		left--
		val, err := parseReply(msg)
		if err != nil {
			if first == nil {
				rq := reqs[i]
				first = fmt.Errorf("%s %s%s: %w", rq.resource, rq.attribute, rq.operation, err)
			}
			continue
		}
		results[i] = val
	}
	return results, first
}

// parseReply reads a reply's result: the first element of its JSON array.
func parseReply(msg *amqp.Message) (json.RawMessage, error) {
	var text string
	switch v := msg.Value.(type) {
	case string:
		text = v
	case []byte:
		text = string(v)
	default:
		for _, d := range msg.Data {
			text += string(d)
		}
	}
	var arr []json.RawMessage
	if err := json.Unmarshal([]byte(text), &arr); err != nil || len(arr) == 0 {
		return nil, fmt.Errorf("a reply that is no JSON array: %s", short(text, 120))
	}
	if ok, _ := msg.ApplicationProperties[propSucceeded].(bool); !ok {
		var why string
		if json.Unmarshal(arr[0], &why) != nil {
			why = string(arr[0])
		}
		return nil, errors.New(why)
	}
	return arr[0], nil
}

// queueNames lists the broker's queues.
func (m *manager) queueNames(ctx context.Context) ([]string, error) {
	return m.brokerNames(ctx, "QueueNames")
}

// brokerNames reads one of the broker's name lists: QueueNames,
// AddressNames.
func (m *manager) brokerNames(ctx context.Context, attribute string) ([]string, error) {
	res, err := m.call(ctx, []request{{resource: "broker", attribute: attribute}})
	if err != nil {
		return nil, err
	}
	var names []string
	if err := json.Unmarshal(res[0], &names); err != nil {
		return nil, fmt.Errorf("broker %s: %w", attribute, err)
	}
	return names, nil
}

// queueSet is the broker's queue list as a set.
func (m *manager) queueSet(ctx context.Context) (map[string]bool, error) {
	list, err := m.queueNames(ctx)
	if err != nil {
		return nil, err
	}
	set := make(map[string]bool, len(list))
	for _, n := range list {
		set[n] = true
	}
	return set, nil
}

// queueStat reads one queue's counters.
func (m *manager) queueStat(ctx context.Context, queue string) (queueStat, error) {
	st := queueStat{Queue: queue}
	reqs := make([]request, 0, len(statAttributes)+1)
	for _, a := range statAttributes {
		reqs = append(reqs, request{resource: "queue." + queue, attribute: a.name})
	}
	for _, a := range []string{"Temporary", "Address", "RoutingType", "Durable"} {
		reqs = append(reqs, request{resource: "queue." + queue, attribute: a})
	}
	res, err := m.call(ctx, reqs)
	if err != nil {
		return st, fmt.Errorf("queue %s (no such queue?): %w", queue, err)
	}
	for i, a := range statAttributes {
		n, err := strconv.ParseInt(string(res[i]), 10, 64)
		if err != nil {
			return st, fmt.Errorf("queue %s %s: %s is not a count", queue, a.name, res[i])
		}
		*a.dst(&st) = n
	}
	k := len(statAttributes)
	st.temporary = string(res[k]) == "true"
	var addr, routing string
	if json.Unmarshal(res[k+1], &addr) != nil || json.Unmarshal(res[k+2], &routing) != nil {
		return st, fmt.Errorf("queue %s: address %s, routing type %s: not strings", queue, res[k+1], res[k+2])
	}
	st.Address, st.Routing, st.Durable = addr, strings.ToLower(routing), string(res[k+3]) == "true"
	return st, nil
}

// addressQueues lists the queues bound to an address: a topic's
// subscription queues. When the address cannot be read, the broker's
// address list tells a missing address from a failure; an address it
// lists was created since the read (Artemis creates one as a client first
// uses it), and is read once more.
func (m *manager) addressQueues(ctx context.Context, address string) ([]string, error) {
	read := func() ([]json.RawMessage, error) {
		return m.call(ctx, []request{{resource: "address." + address, attribute: "QueueNames"}})
	}
	res, err := read()
	for again := true; err != nil; again = false {
		names, lerr := m.brokerNames(ctx, "AddressNames")
		switch {
		case lerr == nil && !contains(names, address):
			return nil, missingAddress(address)
		case lerr == nil && again:
			res, err = read()
			continue
		}
		return nil, fmt.Errorf("address %s: %w", address, err)
	}
	var names []string
	if err := json.Unmarshal(res[0], &names); err != nil {
		return nil, fmt.Errorf("address %s QueueNames: %w", address, err)
	}
	return names, nil
}

// internalQueue is a queue the broker keeps for itself: stats without
// arguments leaves it out.
func internalQueue(name string) bool {
	return strings.HasPrefix(name, "$") || strings.HasPrefix(name, "activemq.") || strings.HasPrefix(name, "notif.")
}

func setupStats(fs *flag.FlagSet, env *environment) func(context.Context, []string) error {
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	address := fs.String("address", "", "the queues bound to this `address` (a topic's subscriptions, each with its dead-letter queue <subscription>.dlq when there is one), with no QUEUE arguments")
	return func(ctx context.Context, args []string) error {
		if *address != "" && len(args) > 0 {
			return usagef("-address lists the queues of an address: give no QUEUE with it")
		}
		for _, a := range args {
			if strings.TrimSpace(a) == "" {
				return usagef("a blank queue name")
			}
		}
		ctx, s, err := env.conn.open(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		m, err := newManager(ctx, s)
		if err != nil {
			return err
		}
		defer m.close(context.WithoutCancel(ctx))
		rows, err := m.stats(ctx, *address, args)
		if len(rows) > 0 || err == nil {
			if perr := printStats(env.stdout, rows, *asJSON); perr != nil {
				return perr
			}
		}
		return err
	}
}

// stats reads the rows of stats: the queues named, else those bound to
// address (a topic's subscriptions, each with its DLQ), else every queue
// of the broker. The rows read are returned with the errors of the
// others.
func (m *manager) stats(ctx context.Context, address string, names []string) ([]queueStat, error) {
	all := len(names) == 0 && address == "" // every queue of the broker
	var err error
	switch {
	case address != "":
		if names, err = m.addressQueues(ctx, address); err != nil {
			return nil, err
		}
		sort.Strings(names)
	case all:
		if names, err = m.queueNames(ctx); err != nil {
			return nil, err
		}
		sort.Strings(names)
	}
	var rows []queueStat
	var errs []error
	var dlqs map[string]string // a subscription's dead-letter queue, by subscription
	var known map[string]bool  // the broker's queues: read with -address, else once a named queue fails
	if address != "" {
		// Looked up in the broker's queue list, never by an attach
		// (which would create a DLQ that has no dead letter yet).
		if known, err = m.queueSet(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cannot look for the subscriptions' dead-letter queues: %w", err))
		}
		dlqs = subscriptionDLQs(names, known)
	}
	listed := all || address != "" // names is the broker's list of a moment, not the user's
	for _, q := range names {
		if all && (internalQueue(q) || q == m.reply) {
			continue
		}
		st, err := m.queueStat(ctx, q)
		if err != nil {
			if listed {
				// Read after the failure: a queue deleted since it was
				// listed is left out (a subscription removed, a
				// non-durable one whose last consumer left), not an error.
				if now, lerr := m.queueSet(ctx); lerr == nil && !now[q] {
					continue
				}
				errs = append(errs, err)
				continue
			}
			if known == nil {
				known, _ = m.queueSet(ctx) // nil when unread: the error as it is
			}
			if known != nil && !known[q] {
				err = missingQueue(q)
			}
			errs = append(errs, err)
			continue
		}
		if all && st.temporary {
			continue
		}
		if dlq, ok := dlqs[q]; ok {
			if st.DLQ, err = m.dlqStat(ctx, q, dlq); err != nil {
				errs = append(errs, err)
			}
		}
		rows = append(rows, st)
	}
	return rows, errors.Join(errs...)
}

// dlqSuffix names a queue's dead-letter queue: <queue>.dlq, for a
// topic's subscription queue as for any other (the library's and every
// BabelQueue SDK's rule).
const dlqSuffix = ".dlq"

// subscriptionDLQs picks, for each subscription queue of a topic (subs),
// its dead-letter queue <subscription>.dlq when the broker has it
// (present): none is normal, it is made at the first dead letter. A queue
// of that name bound to the topic itself is one more subscription, not a
// DLQ.
func subscriptionDLQs(subs []string, present map[string]bool) map[string]string {
	onTopic := make(map[string]bool, len(subs))
	for _, q := range subs {
		onTopic[q] = true
	}
	dlqs := make(map[string]string)
	for _, q := range subs {
		if dlq := q + dlqSuffix; present[dlq] && !onTopic[dlq] {
			dlqs[q] = dlq
		}
	}
	return dlqs
}

// dlqStat reads the counters of subscription sub's dead-letter queue. One
// deleted since the queue list was read is left out, not an error.
func (m *manager) dlqStat(ctx context.Context, sub, dlq string) (*queueStat, error) {
	st, err := m.queueStat(ctx, dlq)
	if err == nil {
		return &st, nil
	}
	if present, lerr := m.queueSet(ctx); lerr == nil && !present[dlq] {
		return nil, nil
	}
	return nil, fmt.Errorf("the dead-letter queue of subscription %s: %w", sub, err)
}

// printStats prints one row per queue; a subscription's dead-letter queue
// (stats -address) is the row right after it in the table, and its own
// object, "dlq", in the subscription's JSON line.
func printStats(w io.Writer, rows []queueStat, asJSON bool) error {
	if asJSON {
		return printJSONLines(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tMESSAGES\tCONSUMERS\tDELIVERING\tSCHEDULED\tADDED\tADDRESS\tROUTING\tDURABLE")
	for _, row := range rows {
		for _, r := range []*queueStat{&row, row.DLQ} {
			if r != nil {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%t\n", r.Queue, r.Messages, r.Consumers, r.Delivering, r.Scheduled, r.Added, r.Address, r.Routing, r.Durable)
			}
		}
	}
	return tw.Flush()
}
