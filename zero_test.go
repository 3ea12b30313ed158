package artemis

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// TestZeroValuesDoNotPanic: every exported type's zero value (and a nil
// pointer where a method has a pointer receiver a caller may hold before it
// is set) answers each of its methods with a value or an error, never a
// panic.
func TestZeroValuesDoNotPanic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	msg := &amqp.Message{Value: "{}"}
	calls := map[string]func() error{
		"Backoff.Delay":                func() error { return err0(Backoff{}.Delay(3, 0.5)) },
		"Backoff.Validate":             func() error { return err0(Backoff{}.Validate()) },
		"Client.Close":                 func() error { return err0((&Client{}).Close(context.Background())) },
		"Client.Status":                func() error { return err0((&Client{}).Status()) },
		"Client.Publisher":             func() error { _, err := (&Client{}).Publisher(ctx, "q"); return err },
		"Client.Consume":               func() error { return err0((&Client{}).Consume(ctx, "q", nil)) },
		"Client.Consume consumer":      func() error { return err0((&Client{}).Consume(ctx, "q", &Consumer{})) },
		"nil Client.Close":             func() error { return err0((*Client)(nil).Close(context.Background())) },
		"nil Client.Status":            func() error { return err0((*Client)(nil).Status()) },
		"ClientPublisher.Close":        func() error { return err0((&ClientPublisher{}).Close(ctx)) },
		"ClientPublisher.Publish":      func() error { _, err := (&ClientPublisher{}).Publish(ctx, Job(urnCreated, nil)); return err },
		"ConnectionEventKind.String":   func() error { return err0(ConnectionEventKind(0).String()) },
		"Consumer.Handle":              func() error { return err0((&Consumer{}).Handle(ctx, fakelink.NewReceiver(t, "q"), msg)) },
		"Consumer.Listen":              func() error { return err0((&Consumer{}).Listen(ctx, fakelink.NewReceiver(t, "q"))) },
		"Consumer.Listen nil":          func() error { return err0((&Consumer{}).Listen(ctx, nil)) },
		"DeliveryError.Error":          func() error { return err0((&DeliveryError{}).Error()) },
		"DeliveryError.Is":             func() error { return err0((&DeliveryError{}).Is(ErrPoison)) },
		"DeliveryError.Unwrap":         func() error { return err0((&DeliveryError{}).Unwrap()) },
		"nil DeliveryError.Error":      func() error { return err0((*DeliveryError)(nil).Error()) },
		"Disposition.String":           func() error { return err0(Disposition(0).String()) },
		"Envelope.Bind":                func() error { var v map[string]any; return (&Envelope{}).Bind(&v) },
		"Envelope.Encode":              func() error { _, err := (&Envelope{}).Encode(); return err },
		"Envelope.URN":                 func() error { return err0((&Envelope{}).URN) },
		"Envelope.Validate":            func() error { return err0((&Envelope{}).Validate()) },
		"nil Envelope.Validate":        func() error { return err0((*Envelope)(nil).Validate()) },
		"nil Envelope.Encode":          func() error { _, err := (*Envelope)(nil).Encode(); return err },
		"HeaderCarrier.Get":            func() error { return err0(HeaderCarrier(nil).Get("k")) },
		"HeaderCarrier.Keys":           func() error { return err0(HeaderCarrier(nil).Keys()) },
		"OutcomeError.Error":           func() error { return err0((&OutcomeError{}).Error()) },
		"OutcomeError.Is":              func() error { return err0((&OutcomeError{}).Is(ErrNotAccepted)) },
		"PanicError.Error":             func() error { return err0((&PanicError{}).Error()) },
		"PublishOutcome.String":        func() error { return err0(PublishOutcome(0).String()) },
		"Publisher.Publish":            func() error { _, err := (&Publisher{}).Publish(ctx, Job(urnCreated, nil)); return err },
		"Publisher.Publish envelope":   func() error { _, err := (&Publisher{}).Publish(ctx, &Envelope{}); return err },
		"Publisher.PublishWithReceipt": func() error { _, err := (&Publisher{}).PublishWithReceipt(ctx, Job(urnCreated, nil)); return err },
		"NewPublisher nil.Publish":     func() error { _, err := NewPublisher(nil, "q").Publish(ctx, Job(urnCreated, nil)); return err },
		"Publisher by hand, options": func() error {
			_, err := (&Publisher{path: pathOf(&fakelink.Sender{})}).Publish(ctx, Job(urnCreated, nil), WithPriority(1))
			return err
		},
		"Receipt.Done":        func() error { return err0((&Receipt{}).Done()) },
		"Receipt.ID":          func() error { return err0((&Receipt{}).ID()) },
		"Receipt.Wait":        func() error { return err0((&Receipt{}).Wait(ctx)) },
		"DeliveryKind.String": func() error { return err0(DeliveryKind(0).String()) },
		"DeliveryKind.Err":    func() error { return err0(DeliveryKind(0).Err()) },
	}
	// These are asked of something that cannot work: they must say so.
	wantErr := map[string]bool{}
	for _, n := range []string{"Client.Publisher", "Client.Consume", "Client.Consume consumer", "ClientPublisher.Close",
		"ClientPublisher.Publish", "Consumer.Listen nil", "Envelope.Validate", "nil Envelope.Validate",
		"nil Envelope.Encode", "Publisher.Publish", "Publisher.Publish envelope", "Publisher.PublishWithReceipt",
		"NewPublisher nil.Publish", "Receipt.Wait"} {
		require.Contains(t, calls, n)
		wantErr[n] = true
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("panic: %v", fmt.Sprint(p))
				}
			}()
			err := call()
			if wantErr[name] {
				assert.Error(t, err)
			}
		})
	}
}

// err0 keeps a call's error, if it returns one, for the table above.
func err0(v any) error {
	err, _ := v.(error)
	return err
}

// TestEveryPublishMethodOfAZeroPublisher: every Publish* method of a zero
// or nil Publisher and a zero ClientPublisher (found by reflection, so a
// new one is covered), given each kind of Outgoing, returns an error matching ErrInvalidConfig and never
// panics, whatever valid input it is given. (Through a nil
// *ClientPublisher, Go itself panics reading the embedded field before any
// method runs, as for every embedded pointer.)
func TestEveryPublishMethodOfAZeroPublisher(t *testing.T) {
	env, err := NewEnvelope(urnCreated, nil, EnvelopeTraceID(testTrace))
	require.NoError(t, err)
	body, err := env.Encode()
	require.NoError(t, err)
	ctx := context.Background()
	arg := func(typ reflect.Type, m Outgoing) reflect.Value {
		switch {
		case typ == reflect.TypeOf((*context.Context)(nil)).Elem():
			return reflect.ValueOf(ctx)
		case typ == reflect.TypeOf((*Outgoing)(nil)).Elem():
			return reflect.ValueOf(&m).Elem()
		case typ.Kind() == reflect.String:
			return reflect.ValueOf(urnCreated)
		}
		return reflect.Zero(typ)
	}
	inputs := map[string]Outgoing{"Job": Job(urnCreated, nil), "Envelope": env, "Encoded": Encoded(body)}
	for name, recv := range map[string]any{
		"Publisher{}": &Publisher{}, "nil Publisher": (*Publisher)(nil),
		"ClientPublisher{}": &ClientPublisher{},
	} {
		v := reflect.ValueOf(recv)
		n := 0
		for i := 0; i < v.NumMethod(); i++ {
			m := v.Type().Method(i)
			if !strings.HasPrefix(m.Name, "Publish") {
				continue
			}
			for in, o := range inputs {
				n++
				t.Run(name+"."+m.Name+"("+in+")", func(t *testing.T) {
					mt := m.Type
					args := []reflect.Value{v}
					for j := 1; j < mt.NumIn(); j++ {
						if mt.IsVariadic() && j == mt.NumIn()-1 {
							break
						}
						args = append(args, arg(mt.In(j), o))
					}
					var out []reflect.Value
					require.NotPanics(t, func() { out = m.Func.Call(args) })
					got, _ := out[len(out)-1].Interface().(error)
					assert.ErrorIs(t, got, ErrInvalidConfig)
				})
			}
		}
		assert.GreaterOrEqual(t, n, 5, "%s: the Publish methods were not found", name)
	}
}
