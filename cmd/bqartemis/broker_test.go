package main

import (
	"testing"

	"github.com/Azure/go-amqp"
)

// The copy of a message the broker moved drops the annotations by which
// Artemis would route it over the redrive link's own routing (a JMS topic
// publisher's x-opt-jms-dest, x-opt-routing-type), as the library's
// dead-letter copy does, and keeps the others.
func TestBrokerCopyDropsTheRoutingAnnotations(t *testing.T) {
	src := &amqp.Message{Value: "{}", Annotations: amqp.Annotations{
		"x-opt-jms-dest": int8(1), "x-opt-routing-type": int8(0), "x-opt-bq-urn": "urn:babel:orders:created",
		"x-opt-ORIG-ADDRESS": "orders",
	}}
	out := brokerCopy(src, &record{OrigAddress: "orders", OrigQueue: "orders"}, "DLQ", false)
	for _, k := range []string{"x-opt-jms-dest", "x-opt-routing-type", "x-opt-ORIG-ADDRESS"} {
		if _, ok := out.Annotations[k]; ok {
			t.Errorf("the copy keeps %s", k)
		}
	}
	if out.Annotations["x-opt-bq-urn"] != "urn:babel:orders:created" {
		t.Errorf("the copy lost x-opt-bq-urn: %v", out.Annotations)
	}
	if _, ok := src.Annotations["x-opt-jms-dest"]; !ok {
		t.Error("the source's annotations changed")
	}
}
