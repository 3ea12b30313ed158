package artemis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOutcomeError(t *testing.T) {
	brokerErr := &amqp.Error{Condition: amqp.ErrCondResourceLimitExceeded, Description: "address full"}
	tests := []struct {
		name      string
		state     amqp.DeliveryState
		wantNil   bool
		msg       string
		unwrapped error
		unknown   bool // no outcome: ErrOutcomeUnknown, not ErrNotAccepted
	}{
		{name: "accepted", state: &amqp.StateAccepted{}, wantNil: true},
		{name: "rejected with error", state: &amqp.StateRejected{Error: brokerErr}, msg: "rejected the transfer: *Error{Condition: amqp:resource-limit-exceeded, Description: address full", unwrapped: brokerErr},
		{name: "rejected bare", state: &amqp.StateRejected{}, msg: "broker rejected the transfer"},
		{name: "released", state: &amqp.StateReleased{}, msg: "released"},
		{name: "modified", state: &amqp.StateModified{DeliveryFailed: true}, msg: "modified the transfer (delivery-failed true, undeliverable-here false)"},
		{name: "modified undeliverable", state: &amqp.StateModified{UndeliverableHere: true}, msg: "delivery-failed false, undeliverable-here true"},
		{name: "received is not final", state: &amqp.StateReceived{}, msg: "StateReceived, not accepted"},
		{name: "no outcome", state: nil, msg: "without an outcome", unknown: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := outcomeError(tt.state)
			if tt.wantNil {
				if err != nil {
					t.Errorf("outcomeError = %v, want nil", err)
				}
				return
			}
			var oe *OutcomeError
			if !errors.As(err, &oe) || oe.State != tt.state {
				t.Fatalf("outcomeError = %#v, want an *OutcomeError holding the state", err)
			}
			if got := errors.Is(err, ErrNotAccepted); got == tt.unknown {
				t.Errorf("%v: matches ErrNotAccepted %t, want %t", err, got, !tt.unknown)
			}
			if got := errors.Is(err, ErrOutcomeUnknown); got != tt.unknown {
				t.Errorf("%v: matches ErrOutcomeUnknown %t, want %t", err, got, tt.unknown)
			}
			want := PublishNotAccepted
			if tt.unknown {
				want = PublishUnknown
			}
			if got := publishOutcome(err); got != want {
				t.Errorf("publishOutcome(%v) = %v, want %v", err, got, want)
			}
			if errors.Is(err, ErrInvalidEnvelope) || errors.Is(err, ErrDeadLetterFailed) {
				t.Errorf("%v matches an unrelated sentinel", err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("message %q does not contain %q", err, tt.msg)
			}
			if got := errors.Unwrap(err); got != tt.unwrapped { //nolint:errorlint // the identity of the direct cause is what is tested
				t.Errorf("Unwrap = %v, want %v", got, tt.unwrapped)
			}
		})
	}
}

// outcomeOnly is an outcomeSender returning a fixed outcome and error; its
// Send panics, since sendConfirmed must use SendOutcome on an outcomeSender.
func outcomeOnly(state amqp.DeliveryState, err error) *fakelink.Sender {
	return &fakelink.Sender{Outcome: fakelink.Fixed(state, err), OutcomeOnly: true}
}

func TestSendConfirmedOutcomeSender(t *testing.T) {
	ctx := context.Background()
	msg := mustMessage(t, contractPHP(t))
	sendErr := errors.New("connection reset")
	tests := []struct {
		name        string
		s           *fakelink.Sender
		notAccepted bool
		wantErr     error
	}{
		{name: "accepted", s: outcomeOnly(&amqp.StateAccepted{}, nil)},
		{name: "rejected", s: outcomeOnly(&amqp.StateRejected{}, nil), notAccepted: true},
		{name: "released", s: outcomeOnly(&amqp.StateReleased{}, nil), notAccepted: true},
		{name: "modified", s: outcomeOnly(&amqp.StateModified{DeliveryFailed: true}, nil), notAccepted: true},
		{name: "nil state nil error", s: outcomeOnly(nil, nil), wantErr: ErrOutcomeUnknown},
		{name: "send error", s: outcomeOnly(nil, sendErr), wantErr: sendErr},
		{name: "send error wins over a state", s: outcomeOnly(&amqp.StateAccepted{}, sendErr), wantErr: sendErr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := sendConfirmed(ctx, tt.s, msg)
			if tt.s.Count() != 1 {
				t.Errorf("SendOutcome called %d times", tt.s.Count())
			}
			switch {
			case tt.notAccepted:
				if !errors.Is(err, ErrNotAccepted) {
					t.Errorf("sendConfirmed = %v, want ErrNotAccepted", err)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) || errors.Is(err, ErrNotAccepted) {
					t.Errorf("sendConfirmed = %v, want %v", err, tt.wantErr)
				}
			default:
				if err != nil {
					t.Errorf("sendConfirmed = %v, want nil", err)
				}
			}
		})
	}

	t.Run("fakelink sender", func(t *testing.T) {
		for name, out := range map[string]func(context.Context, *amqp.Message) (amqp.DeliveryState, error){
			"accept": fakelink.Accept, "reject": fakelink.Reject, "release": fakelink.Release, "modify": fakelink.Modify,
		} {
			s := &fakelink.Sender{Outcome: out}
			err := sendConfirmed(ctx, s, msg)
			if (name == "accept") != (err == nil) || (err != nil && !errors.Is(err, ErrNotAccepted)) {
				t.Errorf("%s: sendConfirmed = %v", name, err)
			}
			if len(s.Sent()) != 1 || s.Sent()[0] != msg {
				t.Errorf("%s: sent %v", name, s.Sent())
			}
		}
	})
}

// TestSendConfirmedPlainSenderTrustsSend documents a limitation: a Sender
// that is neither an outcomeSender nor an *amqp.Sender (no SendWithReceipt)
// only has Send, which, like go-amqp's Send, returns nil for released and
// modified outcomes. sendConfirmed cannot see those, so they count as
// success; only a rejection or a link error fails.
func TestSendConfirmedPlainSenderTrustsSend(t *testing.T) {
	ctx := context.Background()
	msg := mustMessage(t, contractPHP(t))
	tests := []struct {
		name    string
		outcome func(context.Context, *amqp.Message) (amqp.DeliveryState, error)
		wantErr bool
	}{
		{"accepted is success", fakelink.Accept, false},
		{"released counts as success (limitation)", fakelink.Release, false},
		{"modified counts as success (limitation)", fakelink.Modify, false},
		{"rejected fails", fakelink.Reject, true},
		{"link closed fails", fakelink.Closed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &fakelink.Sender{Outcome: tt.outcome}
			err := sendConfirmed(ctx, fakelink.PlainSender{S: inner}, msg)
			if (err != nil) != tt.wantErr {
				t.Errorf("sendConfirmed = %v, want error %t", err, tt.wantErr)
			}
			if len(inner.Sent()) != 1 {
				t.Errorf("sent %d", len(inner.Sent()))
			}
			if tt.name == "rejected fails" {
				// The rejection comes back as Send's *amqp.Error, not an *OutcomeError.
				var ae *amqp.Error
				if !errors.As(err, &ae) || errors.Is(err, ErrNotAccepted) {
					t.Errorf("rejected through Send: %v", err)
				}
			}
		})
	}

	t.Run("publish through a plain sender returns the id on release (limitation)", func(t *testing.T) {
		inner := &fakelink.Sender{Outcome: fakelink.Release}
		id, err := NewPublisher(fakelink.PlainSender{S: inner}, "orders").Publish(ctx, Job("urn:a:b", nil))
		if err != nil || id == "" {
			t.Errorf("Publish = %q, %v", id, err)
		}
		if len(inner.Kept()) != 0 {
			t.Errorf("the fake broker kept a released message")
		}
	})
}

// TestHandoffContextKeepsTheCallersDoneOnly: go-amqp's connection writer
// drops a numbered transfer whose context reports an error or a past
// deadline; the context it gets ends the credit wait with the caller's, and
// reports neither.
func TestHandoffContextKeepsTheCallersDoneOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	h := &handoffContext{Context: ctx}
	assert.Equal(t, ctx.Done(), h.Done(), "the credit wait still ends with the caller's context")
	assert.NoError(t, h.Err())
	_, ok := h.Deadline()
	assert.False(t, ok)
}

// The resolver's deadline is one timer, re-armed wait after wait, until it
// fires: then its context reports the deadline and the next wait gets a
// new timer whose channel is open.
func TestExpiryIsReusedUntilItFires(t *testing.T) {
	var e expiry
	first := e.start(time.Hour)
	timer := e.t
	assert.NoError(t, first.Err())
	assert.False(t, e.stop(), "stopped before it fired")
	second := e.start(time.Hour)
	assert.Same(t, timer, e.t, "the same timer, re-armed")
	assert.Equal(t, first.Done(), second.Done(), "and the same channel")
	assert.False(t, e.stop())

	fired := e.start(time.Millisecond)
	select {
	case <-fired.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline never fired")
	}
	assert.ErrorIs(t, fired.Err(), context.DeadlineExceeded)
	assert.True(t, e.stop(), "it fired")
	next := e.start(time.Hour)
	assert.NotSame(t, timer, e.t, "a new timer after one that fired")
	assert.NoError(t, next.Err(), "with an open channel")
	assert.False(t, e.stop())

	// A start whose stop never came (its wait exited the goroutine) leaves
	// a timer that may still fire: the next start does not re-arm it.
	_ = e.start(time.Hour)
	left := e.t
	_ = e.start(time.Hour)
	assert.NotSame(t, left, e.t, "a timer left armed is not reused")
	assert.False(t, e.stop())

	d, ok := next.Deadline()
	assert.False(t, ok)
	assert.Zero(t, d)
	assert.Nil(t, next.Value("key"))
}

// A pooled message is used only where the sender reads it only while the
// transfer is written: an *amqp.Sender, or a ClientPublisher's go-amqp link
// for a message without a duplicate id (kept for a resend). A test's fake
// link, and any other Sender, get a fresh message.
func TestPublisherReusesMessagesOnlyWhereItIsSafe(t *testing.T) {
	plain, dup := &publishConfig{}, &publishConfig{dupID: true}
	amqpSender := NewPublisher(new(amqp.Sender), "q")
	assert.True(t, amqpSender.reusesMessages(plain))
	assert.True(t, amqpSender.reusesMessages(dup))
	assert.False(t, NewPublisher(&fakelink.Sender{Discard: true}, "q").reusesMessages(plain))

	_, pub := newPublisherHarness(t, nil)
	assert.False(t, pub.reusesMessages(plain), "a fake link")
	cs := senderOf(pub)
	cs.cur.Store(&senderLink{sender: cs, link: new(amqp.Sender), goAMQP: true})
	assert.True(t, pub.reusesMessages(plain), "a go-amqp link")
	assert.False(t, pub.reusesMessages(dup), "kept for a resend")
	header := &publishConfig{headers: map[string]string{PropDuplicateID: "order-1042"}}
	assert.False(t, pub.reusesMessages(header), "a duplicate id given as a header is kept too")
	blank := &publishConfig{headers: map[string]string{PropDuplicateID: " "}}
	assert.True(t, pub.reusesMessages(blank), "a blank header is not sent")
	cs.cur.Store(nil)
	assert.False(t, pub.reusesMessages(plain), "no link yet")
}

// cutLink is a go-amqp-like link (SendWithReceipt) over which a message
// goes in several frames, and whose every transfer is cut by its context
// after frames of them were written: it reads the context before each
// written frame as go-amqp's connection writer does (conn.go,
// getWriteTimeout: Err, then Deadline), then waits for the next frame's
// hand-over, which only the context ends, and answers as go-amqp's
// Sender.send does then.
type cutLink struct {
	frames int // written before the cut: 0 is a transfer cut before its first
	closed atomic.Bool
}

func (l *cutLink) SendWithReceipt(ctx context.Context, _ *amqp.Message, _ *amqp.SendWithReceiptOptions) (amqp.SendReceipt, error) {
	if l.closed.Load() {
		return amqp.SendReceipt{}, &amqp.LinkError{} // detached: go-amqp fails the send at once
	}
	for range l.frames {
		if err := ctx.Err(); err != nil {
			return amqp.SendReceipt{}, err // go-amqp drops a frame whose context ended
		}
		_, _ = ctx.Deadline()
	}
	<-ctx.Done()
	return amqp.SendReceipt{}, &amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded, Description: "credit limit exceeded for sending link x"}
}

func (l *cutLink) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	return errors.New("cutLink: Send is not used")
}

func (l *cutLink) Close(context.Context) error {
	l.closed.Store(true)
	return nil
}

// publishWays are the two ways to publish, each returning the publish's
// error: Publish, and PublishWithReceipt followed by the receipt's Wait.
var publishWays = map[string]func(ctx context.Context, p *Publisher, opts ...PublishOption) error{
	"Publish": func(ctx context.Context, p *Publisher, opts ...PublishOption) error {
		_, err := p.Publish(ctx, Job(urnCreated, orderData), opts...)
		return err
	},
	"PublishWithReceipt": func(ctx context.Context, p *Publisher, opts ...PublishOption) error {
		r, err := p.PublishWithReceipt(ctx, Job(urnCreated, orderData), opts...)
		if err != nil {
			return err
		}
		return r.Wait(ctx)
	},
}

// A transfer whose context ends between two of its frames leaves an
// incomplete delivery on the link, on which go-amqp would write the next
// transfer: the link is detached. The publish is reported as never sent,
// as one cut before its first frame is (the broker never stores an
// incomplete delivery), and that one keeps its link.
func TestTransferCutBetweenItsFramesDetachesTheLink(t *testing.T) {
	for name, publish := range publishWays {
		for _, frames := range []int{0, 1, 3} {
			t.Run(fmt.Sprintf("%s/%d frames written", name, frames), func(t *testing.T) {
				l := &cutLink{frames: frames}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
				defer cancel()
				err := publish(ctx, NewPublisher(l, "orders"))
				require.ErrorIs(t, err, context.DeadlineExceeded)
				var ae *amqp.Error
				require.ErrorAs(t, err, &ae)
				assert.Equal(t, amqp.ErrCondTransferLimitExceeded, ae.Condition)
				assert.NotErrorIs(t, err, ErrOutcomeUnknown, "an incomplete delivery is never stored")
				if frames == 0 {
					assert.Never(t, l.closed.Load, 50*time.Millisecond, 5*time.Millisecond, "nothing written: the link stays")
					return
				}
				assert.Eventually(t, l.closed.Load, 5*time.Second, time.Millisecond, "the link with the incomplete delivery is detached")
				assert.Contains(t, err.Error(), "cut between its frames")
			})
		}
	}
}

// wirePeer is the broker's end of an in-process AMQP 1.0 connection (a
// net.Pipe), just enough of one for a go-amqp Sender: the protocol header,
// open (the smallest frame size the spec allows, so a message goes in
// several frames), begin, the attach answered with credit, then every
// frame read and counted. When revoke is set, the first transfer frame is
// answered with a flow of no credit, as a broker whose address filled up
// sends: go-amqp then holds the next frame of that transfer, which only the
// sender's context ends.
type wirePeer struct {
	conn      net.Conn
	credit    uint32
	revoke    bool
	transfers atomic.Int32  // transfer frames read
	detached  chan struct{} // closed when a detach is read
}

const wireFrameSize = 512

func (p *wirePeer) run() {
	defer p.conn.Close()
	header := make([]byte, 8)
	if _, err := io.ReadFull(p.conn, header); err != nil {
		return
	}
	if _, err := p.conn.Write(header); err != nil {
		return
	}
	for {
		code, body, err := p.read()
		if err != nil {
			return
		}
		var reply []byte
		switch code {
		case 0x10: // open
			reply = wireFrame(wireDescribed(0x10, wireString(0xa1, "peer"), wireNull, wireUint(wireFrameSize)))
		case 0x11: // begin
			reply = wireFrame(wireDescribed(0x11, []byte{0x60, 0, 0}, wireUint(0), wireUint(1<<20), wireUint(1<<20)))
		case 0x12: // attach: answered as the receiver, with the target, then credit
			target := wireDescribed(0x29, wireString(0xa1, "orders"))
			reply = wireFrame(wireDescribed(0x12, wireString(0xa1, wireAttachName(body)), wireUint(0), []byte{0x41}, wireNull, wireNull, wireNull, target))
			reply = append(reply, p.flow(p.credit)...)
		case 0x14: // transfer
			if p.transfers.Add(1) == 1 && p.revoke {
				reply = p.flow(0)
			}
		case 0x16: // detach
			close(p.detached)
		}
		if reply != nil {
			if _, err := p.conn.Write(reply); err != nil {
				return
			}
		}
	}
}

func (p *wirePeer) flow(credit uint32) []byte {
	return wireFrame(wireDescribed(0x13, wireUint(0), wireUint(1<<20), wireUint(0), wireUint(1<<20), wireUint(0), wireUint(0), wireUint(credit)))
}

// read returns the performative code and the encoded body of the next
// frame, skipping empty frames.
func (p *wirePeer) read() (byte, []byte, error) {
	for {
		head := make([]byte, 8)
		if _, err := io.ReadFull(p.conn, head); err != nil {
			return 0, nil, err
		}
		rest := make([]byte, binary.BigEndian.Uint32(head)-8)
		if _, err := io.ReadFull(p.conn, rest); err != nil {
			return 0, nil, err
		}
		body := rest[int(head[4])*4-8:]
		if len(body) >= 3 && body[0] == 0 && body[1] == 0x53 {
			return body[2], body, nil
		}
	}
}

// wireAttachName reads the link name, the first field of an attach body.
func wireAttachName(body []byte) string {
	fields := body[3:] // after the descriptor
	switch fields[0] {
	case 0xc0:
		fields = fields[3:]
	case 0xd0:
		fields = fields[9:]
	}
	if fields[0] == 0xa1 {
		return string(fields[2 : 2+int(fields[1])])
	}
	n := binary.BigEndian.Uint32(fields[1:])
	return string(fields[5 : 5+n])
}

var wireNull = []byte{0x40}

func wireUint(v uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{0x70}, v)
}

func wireString(code byte, s string) []byte {
	return append([]byte{code, byte(len(s))}, s...)
}

// wireDescribed is a described list: a performative, or a terminus.
func wireDescribed(code byte, fields ...[]byte) []byte {
	var items []byte
	for _, f := range fields {
		items = append(items, f...)
	}
	b := []byte{0x00, 0x53, code, 0xd0}
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(items)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(fields)))
	return append(b, items...)
}

func wireFrame(body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	return append(append(b, 2, 0, 0, 0), body...)
}

// goAMQPSender attaches a go-amqp Sender over an in-process peer.
func goAMQPSender(t *testing.T, p *wirePeer) *amqp.Sender {
	t.Helper()
	client, server := net.Pipe()
	p.conn, p.detached = server, make(chan struct{})
	go p.run()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := amqp.NewConn(ctx, client, &amqp.ConnOptions{ContainerID: "test"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	sess, err := conn.NewSession(ctx, nil)
	require.NoError(t, err)
	snd, err := sess.NewSender(ctx, "orders", nil)
	require.NoError(t, err)
	return snd
}

// On a real go-amqp link over an in-process peer: a transfer whose context
// ends after frames of it were written (the peer revoked the credit after
// the first) fails with go-amqp's credit error, which the library marks as
// cut between its frames, and the link is detached; one whose context ends
// before its first frame (no credit at all) fails with the same go-amqp
// error, left unmarked, and its link stays.
func TestGoAMQPTransferCutBetweenItsFrames(t *testing.T) {
	msg := amqp.NewMessage([]byte(strings.Repeat("x", 20*wireFrameSize)))
	for _, tc := range []struct {
		name   string
		peer   *wirePeer
		cut    bool
		frames int32
	}{
		{"between frames", &wirePeer{credit: 10, revoke: true}, true, 1},
		{"before the first", &wirePeer{credit: 0}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snd := goAMQPSender(t, tc.peer)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := transfer(ctx, snd, msg) // a bare link: detached by cutBetweenFrames
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.True(t, neverSent(err), "go-amqp's credit error: %v", err)
			assert.Equal(t, tc.cut, errors.Is(err, errTransferCut))
			assert.GreaterOrEqual(t, tc.peer.transfers.Load(), tc.frames, "transfer frames written")
			if tc.cut {
				select {
				case <-tc.peer.detached:
				case <-time.After(5 * time.Second):
					t.Fatal("the link with the incomplete delivery was not detached")
				}
				return
			}
			assert.Zero(t, tc.peer.transfers.Load())
			select {
			case <-tc.peer.detached:
				t.Fatal("a link on which nothing was written was detached")
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
}

func (*cutLink) writesFramesAsGoAMQP() {}
