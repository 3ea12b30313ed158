package broker

import "testing"

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://babel:s3cret@127.0.0.1:5672": "amqp://babel:xxxxx@127.0.0.1:5672",
		"amqp://babel:babel@127.0.0.1:5672":  "amqp://xxxxx:xxxxx@127.0.0.1:5672",
		"amqp://babel@127.0.0.1:5672":        "amqp://babel@127.0.0.1:5672",
		"amqp://127.0.0.1:5672":              "amqp://127.0.0.1:5672",
		"amqp://h:1/%zz":                     "(a broker URL that does not parse)",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %s, want %s", in, got, want)
		}
	}
}
