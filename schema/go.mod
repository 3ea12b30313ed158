module github.com/babelqueue/babelqueue-go-artemis/schema

go 1.25.0

replace github.com/babelqueue/babelqueue-go-artemis => ../

require (
	github.com/Azure/go-amqp v1.7.0
	github.com/babelqueue/babelqueue-go-artemis v0.0.0-00010101000000-000000000000
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	golang.org/x/text v0.14.0
)

require github.com/google/uuid v1.6.0 // indirect
