package artemis

import "testing"

// The codec's own costs: Decode and the re-encode of a decoded envelope, for
// a canonical body (what every SDK writes) and a pretty-printed one (a
// hand-written producer), so the price of canonical re-encoding is visible.
var codecBenchBodies = []struct{ name, body string }{
	{"canonical", `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042,"amount":99.9,"currency":"USD","note":"café ☕","lines":[{"sku":"A-1","qty":2},{"sku":"B-2","qty":1}]},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000,"host":"w1"},"attempts":0,"x_custom":{"a":[1,2]}}`},
	{"pretty", `{
  "job": "urn:babel:orders:created",
  "trace_id": "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
  "data": {
    "order_id": 1042,
    "amount": 99.9,
    "currency": "USD",
    "note": "caf\u00e9 \u2615",
    "lines": [
      {"sku": "A-1", "qty": 2},
      {"sku": "B\/2", "qty": 1}
    ]
  },
  "meta": {
    "id": "f1e2d3c4-b5a6-4789-90ab-cdef01234567",
    "queue": "orders",
    "lang": "php",
    "schema_version": 1,
    "created_at": 1749132727000,
    "host": "w1"
  },
  "attempts": 0,
  "x_custom": { "a": [ 1, 2 ] }
}`},
}

func BenchmarkDecodeBody(b *testing.B) {
	for _, tc := range codecBenchBodies {
		b.Run(tc.name, func(b *testing.B) {
			body := []byte(tc.body)
			b.ReportAllocs()
			for b.Loop() {
				env, err := Decode(body)
				if err != nil {
					b.Fatal(err)
				}
				benchSinkEnv = env
			}
		})
	}
}

func BenchmarkEncodeDecoded(b *testing.B) {
	for _, tc := range codecBenchBodies {
		b.Run(tc.name, func(b *testing.B) {
			env, err := Decode([]byte(tc.body))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				out, err := env.Encode()
				if err != nil {
					b.Fatal(err)
				}
				benchSinkID = string(out[:1])
			}
		})
	}
}
