package artemis

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// (gatewayError, a handler failure with a type of its own, is declared
// beside the consumer's tests.)

// codeError is a value-type error.
type codeError int

func (c codeError) Error() string { return fmt.Sprintf("code %d", int(c)) }

// ownWrapper is an application's own wrapper: a type of its own, so it is
// the name, not what it wraps.
type ownWrapper struct{ err error }

func (w *ownWrapper) Error() string { return "retry later: " + w.err.Error() }
func (w *ownWrapper) Unwrap() error { return w.err }

// boundsPanic is the recovered value of an index out of range.
func boundsPanic() (v any) {
	defer func() { v = recover() }()
	var s []int
	i := 3
	_ = s[i]
	return nil
}

// exceptionCases is the table of dead_letter.exception names (CONTRACT.md
// section 5).
var exceptionCases = []struct {
	name  string
	cause error
	want  string
}{
	{"errors.New", errors.New("boom"), "error"},
	{"fmt.Errorf without %w", fmt.Errorf("boom %d", 1), "error"},
	{"fmt.Errorf over errors.New", fmt.Errorf("charge: %w", errors.New("boom")), "error"},
	{"errors.Join of errors.New", errors.Join(errors.New("a"), errors.New("b")), "error"},
	{"own type", &gatewayError{"payment gateway timeout"}, "*artemis.gatewayError"},
	{"own value type", codeError(7), "artemis.codeError"},
	{"fmt.Errorf over own type", fmt.Errorf("charge: %w", &gatewayError{"payment gateway timeout"}), "*artemis.gatewayError"},
	{"fmt.Errorf twice over own type", fmt.Errorf("order 7: %w", fmt.Errorf("charge: %w", &gatewayError{"payment gateway timeout"})), "*artemis.gatewayError"},
	{"fmt.Errorf with two %w, first anonymous", fmt.Errorf("%w; %w", errors.New("a"), &gatewayError{"payment gateway timeout"}), "*artemis.gatewayError"},
	{"fmt.Errorf with two %w, first named", fmt.Errorf("%w; %w", codeError(1), &gatewayError{"payment gateway timeout"}), "artemis.codeError"},
	{"errors.Join depth first", errors.Join(errors.New("a"), fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: errors.New("refused")}), &gatewayError{"payment gateway timeout"}), "*net.OpError"},
	{"errors.Join inside fmt.Errorf", fmt.Errorf("all: %w", errors.Join(errors.New("a"), &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist})), "*fs.PathError"},
	{"context.DeadlineExceeded", context.DeadlineExceeded, "context.deadlineExceededError"},
	{"wrapped context.DeadlineExceeded", fmt.Errorf("call: %w", context.DeadlineExceeded), "context.deadlineExceededError"},
	{"context.Canceled is an errors.New", fmt.Errorf("call: %w", context.Canceled), "error"},
	{"an application's own wrapper is named", &ownWrapper{err: &gatewayError{"payment gateway timeout"}}, "*artemis.ownWrapper"},
	{"panic with a string", &PanicError{Value: "boom"}, "panic: string"},
	{"panic with an int", &PanicError{Value: 42}, "panic: int"},
	{"panic with an own error", &PanicError{Value: &gatewayError{"payment gateway timeout"}}, "panic: *artemis.gatewayError"},
	{"panic with errors.New", &PanicError{Value: errors.New("boom")}, "panic: error"},
	{"panic with a wrapped own error", &PanicError{Value: fmt.Errorf("x: %w", &gatewayError{"payment gateway timeout"})}, "panic: *artemis.gatewayError"},
	{"panic from the runtime", &PanicError{Value: boundsPanic()}, "panic: runtime.boundsError"},
	{"panic wrapped by fmt.Errorf", fmt.Errorf("handler: %w", &PanicError{Value: "boom"}), "panic: string"},
	{"DeliveryError is looked through", &DeliveryError{Kind: ErrHandlerFailed, Err: fmt.Errorf("x: %w", &gatewayError{"payment gateway timeout"})}, "*artemis.gatewayError"},
	{"DeliveryError over errors.New", &DeliveryError{Kind: ErrHandlerFailed, Err: errors.New("x")}, "error"},
	{"OutcomeError is a broker outcome of its own", fmt.Errorf("publish: %w", &OutcomeError{State: &amqp.StateRejected{Error: &amqp.Error{Condition: "amqp:not-found"}}}), "*artemis.OutcomeError"},
	{"amqp errors keep their type", fmt.Errorf("publish: %w", &amqp.LinkError{}), "*amqp.LinkError"},
}

func TestExceptionName(t *testing.T) {
	for _, tc := range exceptionCases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, exceptionName(tc.cause))
			dl := newDeadLetter(ReasonFailed, tc.cause, "orders", 2, fixedClock)
			require.NotNil(t, dl.Exception)
			assert.Equal(t, tc.want, *dl.Exception)
			require.NotNil(t, dl.Error)
			assert.Equal(t, tc.cause.Error(), *dl.Error)
		})
	}
}

// The block a consumer writes names the handler's error type, for a
// returned error and for a panic alike, and the library's own reasons
// (poison, unknown URN) carry no exception.
func TestDeadLetterCopyNamesTheHandlersType(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler HandlerFunc
		want    string
	}{
		{"errors.New", failing(errors.New("card declined")), "error"},
		{"wrapped own type", failing(fmt.Errorf("charge order: %w", &gatewayError{"payment gateway timeout"})), "*artemis.gatewayError"},
		{"panic string", func(context.Context, *Envelope, *amqp.Message) error { panic("boom") }, "panic: string"},
		{"panic own error", func(context.Context, *Envelope, *amqp.Message) error { panic(&gatewayError{"payment gateway timeout"}) }, "panic: *artemis.gatewayError"},
		{"panic errors.New", func(context.Context, *Envelope, *amqp.Message) error { panic(errors.New("boom")) }, "panic: error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dlq := &fakelink.Sender{}
			c := mustConsumer(t, Handlers{urnCreated: tc.handler}, WithDeadLetterSender(dlq))
			got := handleOne(t, c, newRecorder(), dlq, orderMessage(t, 2))
			require.Len(t, got.dlq, 1)
			dl := dlqEnvelope(t, got.dlq[0]).DeadLetter
			require.NotNil(t, dl)
			require.NotNil(t, dl.Exception)
			assert.Equal(t, tc.want, *dl.Exception)
			assert.True(t, strings.Contains(got.dlq[0].Value.(string), `"exception":"`+tc.want+`"`))
		})
	}
}
