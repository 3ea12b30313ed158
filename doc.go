// Package artemis speaks the BabelQueue wire contract on Apache ActiveMQ
// Artemis over AMQP 1.0 (github.com/Azure/go-amqp), so Go services exchange
// queue messages with the Java, .NET, Node, Python and PHP BabelQueue SDKs.
//
// # The envelope
//
// Every message body is one compact UTF-8 JSON object:
//
//	{"job":"urn:babel:orders:created","trace_id":"…","data":{…},"meta":{"id":"…","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}
//
// NewEnvelope, Decode, Envelope.Encode and Envelope.Validate implement it;
// Data stays raw JSON so big integers and unknown keys survive.
//
// # Publishing
//
// A Publisher projects each envelope onto an AMQP message and returns meta.id
// once the broker accepted the transfer:
//
//	| envelope            | AMQP 1.0                                   | JMS view          |
//	|---------------------|--------------------------------------------|-------------------|
//	| encoded envelope    | one amqp-value section holding the string  | TextMessage body  |
//	| job (URN)           | annotation x-opt-jms-type, and subject     | JMSType (subject) |
//	| trace_id            | properties.correlation-id                  | JMSCorrelationID  |
//	| meta.id             | properties.message-id                      | JMSMessageID      |
//	| meta.created_at     | properties.creation-time                   | JMSTimestamp      |
//	| meta.schema_version | application property bq_schema_version="1" | string property   |
//	| meta.lang           | application property bq_source_lang="go"   | string property   |
//	| attempts            | application property bq_attempts="0"       | string property   |
//	| (constant)          | application property bq_app_id="babelqueue"| string property   |
//	| (constant)          | properties.content-type application/json   |                   |
//	| WithDelay           | annotation x-opt-delivery-time (Unix ms)   | scheduled delivery|
//
// # Consuming
//
// A Consumer routes each delivery on x-opt-jms-type (else properties.subject,
// where Artemis puts a JMS producer's JMSType, else the body URN),
// reconciles attempts as max(body attempts, AMQP delivery-count), calls the
// handler and settles the delivery exactly once:
//
//	| outcome                                     | disposition                                           |
//	|---------------------------------------------|-------------------------------------------------------|
//	| handler returns nil                         | accept                                                |
//	| handler fails, attempts+1 < maxTries        | copy with attempts+1 scheduled by the retry schedule, |
//	|                                             | then accept (a wait of 0: modified, delivery-failed)  |
//	| handler fails at the limit, DLQ sender set  | dead_letter block (failed) to <queue>.dlq, then accept|
//	| handler fails at the limit, no DLQ sender   | accept (drop), reported                               |
//	| unknown URN, fail (default)                 | reported; modified, delivery-failed                   |
//	| unknown URN, release                        | modified, delivery-failed                             |
//	| unknown URN, delete                         | accept (drop)                                         |
//	| unknown URN, dead_letter                    | dead_letter block (unknown_urn) to the DLQ, then accept|
//	| bq_schema_version not "1"                   | forwarded as received to the DLQ, then accept (or drop)|
//	| poison body                                 | poison record to the DLQ, then accept (or drop)       |
//	| DLQ write not accepted by the broker        | reported; plain release after the retry delay         |
//	| retry copy not accepted by the broker       | reported; modified, delivery-failed after the delay   |
//
// A dead-letter write counts only when the broker's outcome is accepted;
// anything else (rejected, released, modified, a closed link, the timeout)
// is reported and the source is plainly released after a delay, never lost.
package artemis
