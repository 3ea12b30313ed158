package schema_test

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/schema"
)

//go:embed testdata/schemas
var schemaFiles embed.FS

// A service embeds its schema directory and builds the registry once.
func ExampleFS() {
	reg, err := schema.New(schema.FS(schemaFiles, "testdata/schemas"))
	if err != nil {
		panic(err)
	}
	fmt.Println(reg.URNs())
	// Output: [urn:babel:orders:created urn:babel:payments:captured urn:babel:shared:money]
}

func ExampleRegistry_ValidatePayload() {
	reg, err := schema.New(schema.Bytes("urn:babel:orders:created", []byte(`{
		"$schema": "http://json-schema.org/draft-07/schema#",
		"type": "object",
		"required": ["order_id"],
		"properties": {
			"order_id": {"type": "integer", "minimum": 1},
			"currency": {"enum": ["USD", "EUR", "TRY"]}
		}
	}`)))
	if err != nil {
		panic(err)
	}
	err = reg.ValidatePayload(context.Background(), "urn:babel:orders:created", json.RawMessage(`{"order_id":0,"currency":"GBP"}`))
	fmt.Println(errors.Is(err, artemis.ErrInvalidPayload))
	var pe *artemis.PayloadError
	if errors.As(err, &pe) {
		for _, v := range pe.Violations {
			fmt.Println(v)
		}
	}
	fmt.Println(reg.ValidatePayload(context.Background(), "urn:babel:orders:shipped", json.RawMessage(`{}`))) // no schema: not checked
	// Output:
	// true
	// /currency: must be one of "USD", "EUR", "TRY"
	// /order_id: must be >= 1
	// <nil>
}
