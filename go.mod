module github.com/babelqueue/babelqueue-go-artemis

go 1.25.0

require (
	github.com/Azure/go-amqp v1.7.0
	github.com/google/uuid v1.6.0
)

require (
	github.com/stretchr/testify v1.12.1
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
