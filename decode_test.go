package artemis

import (
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
)

func TestReadBody(t *testing.T) {
	tests := []struct {
		name     string
		msg      *amqp.Message
		want     string
		wantKind bodyKind
		wantErr  string
	}{
		{name: "value string", msg: &amqp.Message{Value: contractExample}, want: contractExample, wantKind: bodyString},
		{name: "value empty string", msg: &amqp.Message{Value: ""}, want: "", wantKind: bodyString},
		{name: "value binary", msg: &amqp.Message{Value: []byte(contractExample)}, want: contractExample, wantKind: bodyBinary},
		{name: "value binary invalid UTF-8", msg: &amqp.Message{Value: []byte{0xff, 0x00}}, want: "\xff\x00", wantKind: bodyBinary},
		{name: "one data section", msg: amqp.NewMessage([]byte(contractExample)), want: contractExample, wantKind: bodyData},
		{name: "one empty data section", msg: &amqp.Message{Data: [][]byte{{}}}, want: "", wantKind: bodyData},
		{name: "several data sections", msg: &amqp.Message{Data: [][]byte{[]byte(contractExample[:10]), []byte(contractExample[10:50]), {}, []byte(contractExample[50:])}}, want: contractExample, wantKind: bodyData},
		{name: "sequence", msg: &amqp.Message{Sequence: [][]any{{"a", int64(1)}}}, wantErr: "sequence"},
		{name: "int value", msg: &amqp.Message{Value: int64(1042)}, wantErr: "int64"},
		{name: "map value", msg: &amqp.Message{Value: map[string]any{"job": "urn:a:b"}}, wantErr: "map"},
		{name: "symbol value", msg: &amqp.Message{Value: amqp.Symbol(contractExample)}, wantErr: "Symbol"},
		{name: "null value", msg: &amqp.Message{Value: amqp.Null{}}, wantErr: "null"},
		{name: "no body", msg: &amqp.Message{}, wantErr: "no body"},
		{name: "empty data list", msg: &amqp.Message{Data: [][]byte{}}, wantErr: "no body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, kind, err := readBody(tt.msg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("readBody = %q, %v; want an error mentioning %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || kind != tt.wantKind {
				t.Errorf("readBody = %q kind %d, want %q kind %d", got, kind, tt.want, tt.wantKind)
			}
		})
	}

	t.Run("data sections are copied when joined", func(t *testing.T) {
		a, b := []byte(`{"x":`), []byte(`1}`)
		got, _, err := readBody(&amqp.Message{Data: [][]byte{a, b}})
		if err != nil {
			t.Fatal(err)
		}
		a[0], b[0] = 'X', 'X'
		if got != `{"x":1}` {
			t.Errorf("joined body changed with its sections: %q", got)
		}
	})
}
