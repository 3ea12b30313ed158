package artemis

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

func TestDispositionNames(t *testing.T) {
	for d, want := range map[Disposition]string{
		DispositionPending:      "pending",
		DispositionAccepted:     "accepted",
		DispositionAbandoned:    "abandoned",
		DispositionReleased:     "released",
		DispositionDeadLettered: "dead_lettered",
		DispositionDropped:      "dropped",
		Disposition(99):         "pending",
	} {
		assert.Equal(t, want, d.String(), "Disposition(%d)", int(d))
	}
}

func TestDeliveryError(t *testing.T) {
	cause := errors.New("payment gateway timeout")
	tests := []struct {
		name string
		err  *DeliveryError
		want string
	}{
		{
			name: "routed and decoded",
			err:  &DeliveryError{Kind: KindHandlerFailed, URN: "urn:a", MessageID: "id-1", Attempts: 2, Disposition: DispositionAbandoned, Err: cause},
			want: "handler failed (urn urn:a, id id-1, attempts 2): abandoned: payment gateway timeout",
		},
		{
			name: "routed, no meta.id",
			err:  &DeliveryError{Kind: KindUnknownURN, URN: "urn:b", Disposition: DispositionReleased},
			want: ErrUnknownURN.Error() + " (urn urn:b, attempts 0): released",
		},
		{
			name: "no urn",
			err:  &DeliveryError{Kind: KindPoison, Disposition: DispositionDeadLettered, Err: cause},
			want: "poison message: dead_lettered: payment gateway timeout",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.err.Error())
			assert.ErrorIs(t, tt.err, tt.err.Kind.Err())
			assert.NotErrorIs(t, tt.err, ErrSettlement, "only its own kind matches")
			assert.Equal(t, tt.err.Err, errors.Unwrap(tt.err)) //nolint:errorlint // the direct cause is what is tested
			if tt.err.Err != nil {
				assert.ErrorIs(t, tt.err, cause, "the cause is reachable")
			}
		})
	}
}

func TestPanicError(t *testing.T) {
	withErr := &PanicError{Value: io.ErrUnexpectedEOF}
	assert.Equal(t, "handler panicked: "+io.ErrUnexpectedEOF.Error(), withErr.Error())
	assert.ErrorIs(t, withErr, io.ErrUnexpectedEOF, "a panic with an error unwraps to it")

	withValue := &PanicError{Value: 42}
	assert.Equal(t, "handler panicked: 42", withValue.Error())
	assert.NoError(t, withValue.Unwrap(), "a panic with a non-error value has no cause")

	wrapped := fmt.Errorf("attempt: %w", withErr)
	var pe *PanicError
	assert.ErrorAs(t, wrapped, &pe)
}

func TestErrorClassification(t *testing.T) {
	cases := []struct {
		err            error
		link, conn     bool
		mayBeStoredErr bool
	}{
		{&amqp.LinkError{}, true, false, true},
		{fmt.Errorf("wrapped: %w", &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced}}), true, false, true},
		{&amqp.SessionError{}, true, true, true},
		{&amqp.ConnError{}, true, true, true},
		{refused, true, true, true},
		{net.ErrClosed, true, true, true},
		{context.Canceled, false, false, true},
		{context.DeadlineExceeded, false, false, true},
		{&amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded, Description: "credit limit exceeded"}, false, false, false},
		{&OutcomeError{State: &amqp.StateRejected{}}, false, false, false},
		{errors.New("encode: message too large"), false, false, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%T %v", tc.err, tc.err), func(t *testing.T) {
			assert.Equal(t, tc.link, linkLost(tc.err), "linkLost")
			assert.Equal(t, tc.conn, connectionLost(tc.err), "connectionLost")
			assert.Equal(t, tc.mayBeStoredErr, mayBeStored(tc.err), "mayBeStored")
		})
	}
}

// TestErrorTextsCarryOnePrefix: every sentinel error of the package (read
// from the source, so a new one is covered) reads "artemis: ...", and an
// error that wraps another adds no prefix of its own, so no text says
// "artemis: " twice, nor the old "babelqueue: ".
func TestErrorTextsCarryOnePrefix(t *testing.T) {
	sentinels := map[string]error{
		"ErrUnknownURN": ErrUnknownURN, "ErrPoison": ErrPoison, "ErrVersionGated": ErrVersionGated,
		"ErrHandlerFailed": ErrHandlerFailed, "ErrDeadLetterFailed": ErrDeadLetterFailed,
		"ErrRetryFailed": ErrRetryFailed, "ErrSettlement": ErrSettlement, "ErrNotAccepted": ErrNotAccepted,
		"ErrInvalidConfig": ErrInvalidConfig, "ErrHandlerExited": ErrHandlerExited, "ErrGivenBack": ErrGivenBack,
		"ErrInvalidPayload": ErrInvalidPayload, "ErrDecrypt": ErrDecrypt, "ErrInvalidEnvelope": ErrInvalidEnvelope,
		"ErrConnect": ErrConnect, "ErrOutcomeUnknown": ErrOutcomeUnknown, "ErrClosed": ErrClosed,
	}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	declared := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					if name.IsExported() && strings.HasPrefix(name.Name, "Err") {
						declared++
						assert.Contains(t, sentinels, name.Name, "a sentinel this test does not check")
					}
				}
			}
		}
	}
	assert.Equal(t, len(sentinels), declared, "the sentinels declared")
	for name, err := range sentinels {
		assert.True(t, strings.HasPrefix(err.Error(), errPrefix), "%s: %q", name, err)
		assert.Equal(t, 1, strings.Count(err.Error(), "artemis:"), "%s: %q", name, err)
	}

	ctx := context.Background()
	wrapped := map[string]error{
		"publish, closed":       publishError("orders", urnCreated, ErrClosed),
		"publish, not accepted": publishError("orders", urnCreated, &OutcomeError{State: &amqp.StateReleased{}}),
		"publish, unknown":      publishError("orders", urnCreated, fmt.Errorf("%w: %w", ErrOutcomeUnknown, &amqp.LinkError{})),
		"dead letter not confirmed": &DeliveryError{Kind: KindDeadLetterFailed, URN: urnCreated, Disposition: DispositionAbandoned,
			Err: publishError("orders.dlq", urnCreated, &OutcomeError{State: &amqp.StateRejected{}})},
		"handler failed": &DeliveryError{Kind: KindHandlerFailed, URN: urnCreated, Err: errors.New("gateway down")},
		"connect":        &connectError{errs: []error{&urlError{url: "amqp://a:5672", err: io.EOF}}},
	}
	// Through the publish and consume paths.
	_, wrapped["publish, refused option"] = NewPublisher(&fakelink.Sender{}, "orders").Publish(ctx, Job(urnCreated, nil), WithPriority(10))
	_, wrapped["publish, no envelope"] = NewPublisher(&fakelink.Sender{}, "orders").Publish(ctx, Encoded("{"))
	rejecting := &fakelink.Sender{Outcome: func(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
		return &amqp.StateRejected{}, nil
	}}
	_, wrapped["publish, rejected"] = NewPublisher(rejecting, "orders").Publish(ctx, Job(urnCreated, nil))
	_, wrapped["publish, link lost"] = NewPublisher(&fakelink.Sender{Gate: func() error { return &amqp.LinkError{} }}, "orders").Publish(ctx, Job(urnCreated, nil))
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	p, err := h.c.Publisher(ctx, "orders")
	require.NoError(t, err)
	require.NoError(t, h.c.Close(ctx))
	_, wrapped["client publish, closed"] = p.Publish(ctx, Job(urnCreated, nil))
	wrapped["client consume, closed"] = h.c.Consume(ctx, "orders", mustConsumer(t, Handlers{urnCreated: succeeding}))

	c, rec, dlq := hostileConsumer(t, failing(errors.New("gateway down")), WithMaxTries(1))
	got := handleOne(t, c, rec, dlq, rawMessage("not json"))
	require.NotEmpty(t, got.reports)
	wrapped["consume, poison"] = got.reports[0].err
	got = handleOne(t, c, rec, dlq, orderMessage(t, 0))
	require.Len(t, got.reports, 2)
	wrapped["consume, handler failed"] = got.reports[1].err

	for name, err := range wrapped {
		require.Error(t, err, name)
		text := err.Error()
		assert.LessOrEqual(t, strings.Count(text, "artemis:"), 1, "%s: %q", name, text)
		assert.NotContains(t, text, "babelqueue:", name)
		t.Logf("%s: %s", name, text)
	}
}

// TestTruncateCutsAtARuneBoundary: a shortened text never ends inside a
// multi-byte UTF-8 sequence (an error text, a log line, a dead-letter
// annotation must be valid UTF-8).
func TestTruncateCutsAtARuneBoundary(t *testing.T) {
	for pad := 36; pad <= 40; pad++ {
		s := strings.Repeat("a", pad) + "é€𝄞 and more text"
		got := truncate(s)
		assert.True(t, utf8.ValidString(got), "%q", got)
		assert.True(t, strings.HasSuffix(got, "..."), "%q", got)
		assert.True(t, strings.HasPrefix(s, strings.TrimSuffix(got, "...")), "%q", got)
	}
	assert.Equal(t, "short é", truncate("short é"))
}
