package artemis

import (
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
)

func TestGroupID(t *testing.T) {
	id := "tenant-7"
	empty := ""
	for _, tc := range []struct {
		name string
		msg  *amqp.Message
		want string
	}{
		{"no properties", &amqp.Message{}, ""},
		{"no group-id", &amqp.Message{Properties: &amqp.MessageProperties{}}, ""},
		{"an empty group-id", &amqp.Message{Properties: &amqp.MessageProperties{GroupID: &empty}}, ""},
		{"a group-id", &amqp.Message{Properties: &amqp.MessageProperties{GroupID: &id}}, "tenant-7"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, groupID(tc.msg)) })
	}
}
