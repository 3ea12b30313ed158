package brokertest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// browseOutput is `artemis browser --verbose` output as Artemis 2.40
// prints it: a text message sent over AMQP, then a message whose body is
// not text (the CLI prints its JMSMessageID).
const browseOutput = `Connection brokerURL = tcp://127.0.0.1:61616
Consumer:: filter = null
Consumer ActiveMQQueue[bqtest.q.1], thread=0 trying to browse 1000 messages
Consumer ActiveMQQueue[bqtest.q.1], thread=0 browsing {"job":"urn:babel:orders:created","data":{"city":"Zürich"}}
...ActiveMQMessage[ID:93cd56b1-ec2c-11f1-9087-02fc00000001]:PERSISTENT/ClientMessageImpl[messageID=4294967937, durable=true, address=bqtest.q.1,userID=93cd56b1-ec2c-11f1-9087-02fc00000001,properties=TypedProperties[NATIVE_MESSAGE_ID=ID:AMQP_NO_PREFIX:be5c02cf, bq_schema_version=1, JMS_AMQP_ORIGINAL_ENCODING=5, bq_app_id=babelqueue, JMSCorrelationID=27885e63, JMS_AMQP_MA_x-opt-jms-type=urn:babel:orders:created, JMSType=urn:babel:orders:created]]
Consumer ActiveMQQueue[bqtest.q.1], thread=0 browsing ID:12f2e416-ec2c-11f1-9167-02fc00000001
...ActiveMQMessage[ID:12f2e416-ec2c-11f1-9167-02fc00000001]:PERSISTENT/ClientMessageImpl[messageID=2147488722, durable=true, address=bqtest.q.1,userID=12f2e416,properties=TypedProperties[JMS_AMQP_ORIGINAL_ENCODING=6]]
Consumer ActiveMQQueue[bqtest.q.1], thread=0 browsed: 2 messages
Consumer ActiveMQQueue[bqtest.q.1], thread=0 Browser thread finished
`

func TestParseBrowse(t *testing.T) {
	msgs := parseBrowse(browseOutput)
	require.Len(t, msgs, 2)

	text := msgs[0]
	assert.True(t, text.IsText)
	assert.Equal(t, `{"job":"urn:babel:orders:created","data":{"city":"Zürich"}}`, text.Text)
	assert.Equal(t, map[string]string{
		"NATIVE_MESSAGE_ID":          "ID:AMQP_NO_PREFIX:be5c02cf",
		"bq_schema_version":          "1",
		"JMS_AMQP_ORIGINAL_ENCODING": "5",
		"bq_app_id":                  "babelqueue",
		"JMSCorrelationID":           "27885e63",
		"JMS_AMQP_MA_x-opt-jms-type": "urn:babel:orders:created",
		"JMSType":                    "urn:babel:orders:created",
	}, text.Properties)
	assert.True(t, strings.HasPrefix(text.Dump, "ActiveMQMessage[ID:93cd56b1"), text.Dump)

	bytes := msgs[1]
	assert.False(t, bytes.IsText, "a non-text message shows its JMSMessageID")
	assert.Empty(t, bytes.Text)
	assert.Equal(t, map[string]string{"JMS_AMQP_ORIGINAL_ENCODING": "6"}, bytes.Properties)
}

func TestParseBrowseWithoutMessages(t *testing.T) {
	assert.Empty(t, parseBrowse("Consumer ActiveMQQueue[q], thread=0 browsed: 0 messages\n"))
	assert.Empty(t, parseTypedProperties("ClientMessageImpl[messageID=1]"))
}

// statOutput is `artemis queue stat --json` output (values are strings).
const statOutput = `Connection brokerURL = tcp://127.0.0.1:61616
{"data":[
   {"id":"3","name":"bqtest.q.1","address":"bqtest.q.1","consumerCount":"0","messagesAdded":"20","messageCount":"16","messagesAcked":"4","deliveringCount":"0","scheduledCount":"0","routingType":"ANYCAST"}
],"count":1}
`

func TestParseStat(t *testing.T) {
	s, err := parseStat(statOutput, "bqtest.q.1")
	require.NoError(t, err)
	assert.Equal(t, QueueStat{MessageCount: 16, MessagesAdded: 20, MessagesAcked: 4}, s)

	_, err = parseStat(statOutput, "bqtest.q.2")
	assert.ErrorContains(t, err, "no row for bqtest.q.2")
	_, err = parseStat("no broker here", "q")
	assert.ErrorContains(t, err, "no JSON")
	_, err = parseStat(strings.Replace(statOutput, `"messageCount":"16"`, `"messageCount":"many"`, 1), "bqtest.q.1")
	assert.ErrorContains(t, err, "messageCount")
}

func TestQueueNames(t *testing.T) {
	name := regexp.MustCompile(`^bqtest\.queuenames\.[0-9a-f]{8}$`)
	a, b := Queue(t), Queue(t)
	assert.Regexp(t, name, a)
	assert.NotEqual(t, a, b, "fresh per call")
	t.Run("Sub Test/x", func(t *testing.T) {
		assert.Regexp(t, `^bqtest\.queuenames-sub-test-x\.[0-9a-f]{8}$`, Queue(t))
	})
	assert.Regexp(t, `^bqtest\.tinydlq\.[0-9a-f]{8}$`, TinyDLQ())
}

func TestDialOptionsTakeCredentialsFromTheURL(t *testing.T) {
	b := &Broker{URL: "amqp://babel:s3cret@127.0.0.1:5672", User: "other", Password: "x"}
	addr, opts, err := b.dialOptions()
	require.NoError(t, err)
	assert.Equal(t, "amqp://127.0.0.1:5672", addr, "credentials are not left in the address")
	assert.NotNil(t, opts.SASLType, "SASL PLAIN")

	b = &Broker{URL: "amqp://127.0.0.1:5672", User: "babel", Password: "babel"}
	addr, opts, err = b.dialOptions()
	require.NoError(t, err)
	assert.Equal(t, "amqp://127.0.0.1:5672", addr)
	assert.NotNil(t, opts.SASLType, "SASL PLAIN from ARTEMIS_USER/ARTEMIS_PASSWORD")

	b = &Broker{URL: "amqp://127.0.0.1:5672"}
	_, opts, err = b.dialOptions()
	require.NoError(t, err)
	assert.Nil(t, opts.SASLType, "no credentials, no SASL")

	_, _, err = (&Broker{URL: "amqp://[::1"}).dialOptions()
	assert.Error(t, err)
}
