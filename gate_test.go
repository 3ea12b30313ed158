package artemis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGateVersion(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]any
		gated bool
		msg   string // part of the gate message
	}{
		{name: "no application properties", props: nil},
		{name: "missing", props: map[string]any{"other": "2"}},
		{name: "nil", props: map[string]any{PropSchemaVersion: nil}},
		{name: "amqp null", props: map[string]any{PropSchemaVersion: amqp.Null{}}},
		{name: "empty string", props: map[string]any{PropSchemaVersion: ""}},
		{name: "ASCII whitespace", props: map[string]any{PropSchemaVersion: "  \t"}},
		{name: "all ASCII whitespace kinds", props: map[string]any{PropSchemaVersion: " \t\n\v\f\r"}},
		{name: "exactly 1", props: map[string]any{PropSchemaVersion: "1"}},
		{name: "leading space", props: map[string]any{PropSchemaVersion: " 1"}, gated: true, msg: `" 1"`},
		{name: "trailing space", props: map[string]any{PropSchemaVersion: "1 "}, gated: true, msg: `"1 "`},
		{name: "2", props: map[string]any{PropSchemaVersion: "2"}, gated: true, msg: `"2"`},
		{name: "1.0", props: map[string]any{PropSchemaVersion: "1.0"}, gated: true, msg: `"1.0"`},
		{name: "01", props: map[string]any{PropSchemaVersion: "01"}, gated: true, msg: `"01"`},
		{name: "non-ASCII space", props: map[string]any{PropSchemaVersion: "\u00a0"}, gated: true, msg: PropSchemaVersion},
		{name: "long value is truncated", props: map[string]any{PropSchemaVersion: strings.Repeat("9", 100)}, gated: true, msg: "..."},
		{name: "int64 1", props: map[string]any{PropSchemaVersion: int64(1)}, gated: true, msg: "int64"},
		{name: "int32 1", props: map[string]any{PropSchemaVersion: int32(1)}, gated: true, msg: "int32"},
		{name: "true", props: map[string]any{PropSchemaVersion: true}, gated: true, msg: "bool"},
		{name: "bytes 1", props: map[string]any{PropSchemaVersion: []byte("1")}, gated: true, msg: "[]uint8"},
		{name: "float64 1", props: map[string]any{PropSchemaVersion: float64(1)}, gated: true, msg: "float64"},
		{name: "symbol 1", props: map[string]any{PropSchemaVersion: amqp.Symbol("1")}, gated: true, msg: "Symbol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := gateVersion(&amqp.Message{ApplicationProperties: tt.props})
			if !tt.gated {
				if err != nil {
					t.Errorf("gated: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("not gated")
			}
			if !strings.Contains(err.Error(), PropSchemaVersion) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("gate message %q does not name %s and %s", err, PropSchemaVersion, tt.msg)
			}
		})
	}
}

func TestVersionGate(t *testing.T) {
	strategies := []UnknownURNStrategy{UnknownURNFail, UnknownURNRelease, UnknownURNDelete, UnknownURNDeadLetter}
	for _, gv := range gateValues {
		for _, strategy := range strategies {
			for _, withDLQ := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s/dlq=%t", gv.name, strategy, withDLQ)
				t.Run(name, func(t *testing.T) {
					msg := orderMessage(t, 0)
					if gv.set {
						msg.ApplicationProperties[PropSchemaVersion] = gv.value
					} else {
						delete(msg.ApplicationProperties, PropSchemaVersion)
					}
					handled := false
					rec := newRecorder()
					dlq := &fakelink.Sender{}
					opts := []ConsumerOption{WithOnError(rec.onError), WithUnknownURN(strategy)}
					if withDLQ {
						opts = append(opts, WithDeadLetterSender(dlq))
					}
					c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
						handled = true
						return nil
					}}, opts...)
					got := handleOne(t, c, rec, dlq, msg)
					assert.Equal(t, fakelink.Accepted, got.disp, "settled on its first delivery, never released")
					if !gv.gated {
						assert.True(t, handled)
						assert.Empty(t, got.reports)
						return
					}
					assert.False(t, handled, "a gated message never reaches a handler")
					require.Len(t, got.reports, 1)
					assert.ErrorIs(t, got.reports[0].err, ErrVersionGated)
					assert.Nil(t, got.reports[0].env, "a gated body is never decoded")
					var de *DeliveryError
					require.ErrorAs(t, got.reports[0].err, &de)
					if strategy == UnknownURNDelete || !withDLQ {
						assert.Equal(t, DispositionDropped, de.Disposition)
						assert.Empty(t, got.dlq)
						return
					}
					assert.Equal(t, DispositionDeadLettered, de.Disposition)
					require.Len(t, got.dlq, 1)
					fwd := got.dlq[0]
					assert.Equal(t, msg.Value, fwd.Value, "forwarded byte for byte")
					assert.NotContains(t, fwd.Value, "dead_letter")
					assert.Equal(t, gv.value, fwd.ApplicationProperties[PropSchemaVersion])
					assert.Equal(t, "orders.dlq", *fwd.Properties.To)
				})
			}
		}
	}
}

func TestHostileSchemaVersionOfEveryType(t *testing.T) {
	ts := time.UnixMilli(1749132727000)
	uuid := amqp.UUID{0x7b, 0x3f, 0x9c, 0x2a}
	for _, tc := range []struct {
		name    string
		value   any // what the peer sent
		decoded any // what go-amqp hands the consumer
		gated   bool
	}{
		{"string 1", "1", "1", false},
		{"string 2", "2", "2", true},
		{"string 1 with a space", " 1", " 1", true},
		{"string 1 with a newline", "1\n", "1\n", true},
		{"empty string", "", "", false},
		{"ASCII whitespace", " \t\r\n\v\f", " \t\r\n\v\f", false},
		{"no-break space is not ASCII whitespace", "\u00a0", "\u00a0", true},
		{"symbol 1, read as the string 1", amqp.Symbol("1"), "1", false},
		{"symbol 2, read as the string 2", amqp.Symbol("2"), "2", true},
		{"bool", true, true, true},
		{"int8", int8(1), int8(1), true},
		{"int16", int16(1), int16(1), true},
		{"int32", int32(1), int32(1), true},
		{"int64", int64(1), int64(1), true},
		{"uint8", uint8(1), uint8(1), true},
		{"uint16", uint16(1), uint16(1), true},
		{"uint32", uint32(1), uint32(1), true},
		{"uint64", uint64(1), uint64(1), true},
		{"float32", float32(1), float32(1), true},
		{"float64", float64(1), float64(1), true},
		{"timestamp", ts, ts, true},
		{"uuid", uuid, uuid, true},
		{"binary 1", []byte("1"), []byte("1"), true},
		{"list", []any{"1"}, []any{"1"}, true},
		{"map", map[string]any{"v": "1"}, map[string]any{"v": "1"}, true},
		{"amqp null", amqp.Null{}, nil, false},
		{"nil", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := orderMessage(t, 0)
			sent.ApplicationProperties[PropSchemaVersion] = tc.value
			msg := wireDecoded(t, sent)
			got0, present := msg.ApplicationProperties[PropSchemaVersion]
			require.True(t, present)
			if ts, ok := tc.decoded.(time.Time); ok {
				assert.True(t, ts.Equal(got0.(time.Time)), "decoded %v", got0)
			} else {
				require.Equal(t, tc.decoded, got0, "go-amqp decodes it as %T", got0)
			}

			var handled bool
			c, rec, dlq := hostileConsumer(t, func(context.Context, *Envelope, *amqp.Message) error {
				handled = true
				return nil
			})
			got := handleOne(t, c, rec, dlq, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			if !tc.gated {
				assert.True(t, handled)
				assert.Empty(t, got.reports)
				assert.Empty(t, got.dlq)
				return
			}
			assert.False(t, handled, "a gated message never reaches a handler")
			de := requireReport(t, got, ErrVersionGated, DispositionDeadLettered)
			assert.Contains(t, de.Error(), PropSchemaVersion)
			require.Len(t, got.dlq, 1)
			fwd := got.dlq[0]
			assert.Equal(t, msg.Value, fwd.Value, "forwarded byte for byte")
			assert.Equal(t, got0, fwd.ApplicationProperties[PropSchemaVersion])
			// The forward goes on the wire too: every decodable type encodes.
			_, err := fwd.MarshalBinary()
			assert.NoError(t, err)
		})
	}
}
