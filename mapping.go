package artemis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
)

// The AMQP names of the contract's projection (section 2).
const (
	// AnnotationJMSType carries the URN; Artemis maps it to JMSType.
	AnnotationJMSType = "x-opt-jms-type"
	// AnnotationDeliveryTime is Artemis's scheduled delivery time (absolute Unix ms).
	AnnotationDeliveryTime = "x-opt-delivery-time"
	// AnnotationDeliveryDelay is Artemis's relative scheduled delivery delay (ms).
	AnnotationDeliveryDelay = "x-opt-delivery-delay"

	PropSchemaVersion = "bq_schema_version"
	PropSourceLang    = "bq_source_lang"
	PropAttempts      = "bq_attempts"
	PropAppID         = "bq_app_id"
	// PropDuplicateID is Artemis's duplicate-detection property, set to
	// meta.id by WithDuplicateDetection.
	PropDuplicateID = "_AMQ_DUPL_ID"

	// AppID is the constant value of bq_app_id.
	AppID = "babelqueue"
	// ContentType is the constant properties.content-type.
	ContentType = "application/json"
)

var contentType = ContentType

// defaultPriority is the AMQP (and JMS) default message priority. go-amqp
// writes a header's Priority even when it is 0, the lowest, and Artemis
// delivers higher priorities first: a header left at 0 would put every
// message of this library behind those of any other producer.
const defaultPriority = 4

// NewMessage projects an envelope onto an AMQP 1.0 message as the contract's
// section 2 says: the canonical JSON as one AMQP value string body, the URN
// in x-opt-jms-type, the trace id as correlation-id, meta.id as message-id,
// meta.created_at as creation-time, content-type application/json, the four
// bq_ application properties, and a durable header. Options add headers and
// scheduled delivery; the envelope keeps its trace id.
func NewMessage(env *Envelope, opts ...PublishOption) (*amqp.Message, error) {
	var cfg publishConfig
	for _, o := range opts {
		o.applyPublish(&cfg)
	}
	return newMessage(context.Background(), env, &cfg)
}

// newMessage is NewMessage with the publish's context, for the payload check.
func newMessage(ctx context.Context, env *Envelope, cfg *publishConfig) (*amqp.Message, error) {
	env, err := checkPublishable(ctx, env, cfg)
	if err != nil {
		return nil, err
	}
	body := env.appendEncode(make([]byte, 0, env.encodedSizeHint()))
	b := new(messageBlock)
	b.project(env, stringView(body), // body is never written again
		publishProperties(env, cfg), publishAnnotations(env.URN, cfg))
	b.applyOptions(cfg)
	return &b.msg, nil
}

// publishProperties are the application properties of a publish: the
// headers and the bq_ properties, and the duplicate id when it was asked for.
func publishProperties(env *Envelope, cfg *publishConfig) map[string]any {
	props := applicationProperties(env, cfg.headers)
	if cfg.dupID && env.Meta.ID != "" {
		props[PropDuplicateID] = env.Meta.ID
	}
	return props
}

// carriesDuplicateID reports whether a publish with cfg sends Artemis's
// duplicate id (publishProperties): asked for, or given as a header.
func (cfg *publishConfig) carriesDuplicateID() bool {
	if cfg.dupID {
		return true
	}
	v, ok := cfg.headers[PropDuplicateID]
	return ok && strings.TrimSpace(v) != ""
}

// publishAnnotations are the message annotations of a publish: the URN, and
// the scheduled delivery time of a delayed one.
func publishAnnotations(urn string, cfg *publishConfig) amqp.Annotations {
	if cfg.delay > 0 {
		return amqp.Annotations{AnnotationJMSType: urn, AnnotationDeliveryTime: cfg.deliveryTime()}
	}
	return amqp.Annotations{AnnotationJMSType: urn}
}

// checkPublishable rejects an envelope that cannot be projected, and an
// option that cannot take effect on it, and returns the envelope to send
// (env, or a copy with protected data: publishConfig.checkPayload); the
// payload check ends with ctx.
func checkPublishable(ctx context.Context, env *Envelope, cfg *publishConfig) (*Envelope, error) {
	if err := cfg.checkOptions(); err != nil {
		return nil, err
	}
	if strings.TrimSpace(env.URN) == "" {
		return nil, fmt.Errorf("%w: the URN is blank", ErrInvalidEnvelope)
	}
	// An envelope built by hand is sent as it is, but never one that every
	// consumer gates or poisons on its first delivery (what Validate says of
	// Encoded bytes).
	switch {
	case env.Meta.SchemaVersion != SchemaVersion:
		return nil, fmt.Errorf("%w: meta.schema_version is %d, want %d", ErrInvalidEnvelope, env.Meta.SchemaVersion, SchemaVersion)
	case env.Attempts < 0:
		return nil, fmt.Errorf("%w: attempts is not an integer >= 0: it is %d", ErrInvalidEnvelope, env.Attempts)
	case strings.TrimSpace(env.TraceID) == "":
		return nil, fmt.Errorf("%w: trace_id is missing or blank", ErrInvalidEnvelope)
	}
	if len(env.Data) != 0 && !jsoncodec.IsObject(env.Data) {
		return nil, fmt.Errorf("%w: data is not a JSON object", ErrInvalidEnvelope)
	}
	if _, err := env.canonicalData(); err != nil {
		// Data assigned by hand: held to what NewEnvelope and Encode take,
		// so nothing is published that a decoder refuses.
		return nil, fmt.Errorf("%w: data %w", ErrInvalidEnvelope, err)
	}
	return cfg.checkPayload(ctx, env)
}

// projection builds the section 2 message around an already encoded body.
func projection(env *Envelope, body string, headers map[string]string) *amqp.Message {
	b := new(messageBlock)
	b.project(env, body, applicationProperties(env, headers), publishAnnotations(env.URN, &publishConfig{}))
	return &b.msg
}

// applicationProperties are the out-of-band headers (blanks dropped) and the
// four bq_ properties, which win over a header of the same name.
func applicationProperties(env *Envelope, headers map[string]string) map[string]any {
	props := make(map[string]any, len(headers)+4)
	for k, v := range headers {
		if strings.TrimSpace(k) == "" || strings.TrimSpace(v) == "" {
			continue
		}
		props[k] = v
	}
	props[PropSchemaVersion] = schemaVersionProperty(env.Meta.SchemaVersion)
	props[PropSourceLang] = langProperty(env.Meta.Lang)
	props[PropAttempts] = attemptsProperty(env.Attempts)
	props[PropAppID] = AppID
	return props
}

// messageBlock holds a message with the header, the properties and the
// values they point to: one allocation instead of three.
type messageBlock struct {
	msg     amqp.Message
	header  amqp.MessageHeader
	props   amqp.MessageProperties
	subject string
	groupID string
	created time.Time
	expiry  time.Time
}

// project makes b.msg the section 2 message of env around an already
// encoded body, with the given application properties and annotations.
func (b *messageBlock) project(env *Envelope, body string, props map[string]any, annotations amqp.Annotations) {
	// Artemis gives JMS peers JMSType from properties.subject; the contract's
	// x-opt-jms-type annotation is what BabelQueue consumers route on. Both
	// carry the URN.
	b.subject = env.URN
	b.header = amqp.MessageHeader{Durable: true, Priority: defaultPriority}
	b.props = amqp.MessageProperties{
		CorrelationID: env.TraceID,
		ContentType:   &contentType,
		Subject:       &b.subject,
	}
	if env.Meta.ID != "" {
		b.props.MessageID = env.Meta.ID
	}
	b.created = time.Time{}
	if env.Meta.CreatedAt != 0 {
		b.created = time.UnixMilli(env.Meta.CreatedAt).UTC()
		b.props.CreationTime = &b.created
	}
	b.msg = amqp.Message{
		Header:                &b.header,
		Annotations:           annotations,
		Properties:            &b.props,
		ApplicationProperties: props,
		Value:                 body,
	}
}

// applyOptions puts the header and property options of a publish on b.msg:
// time to live (the header ttl and the absolute expiry time, creation +
// ttl: a cluster that moves the message restarts the header ttl but keeps
// the absolute time), priority, group.
func (b *messageBlock) applyOptions(cfg *publishConfig) {
	b.header.TTL = cfg.ttlHeader()
	if b.header.TTL > 0 {
		created := b.created
		if created.IsZero() {
			created = time.Now().UTC()
		}
		b.expiry = created.Add(b.header.TTL)
		b.props.AbsoluteExpiryTime = &b.expiry
	}
	if cfg.prioritySet {
		b.header.Priority = uint8(cfg.priority)
	}
	if cfg.groupID != "" {
		b.groupID = cfg.groupID
		b.props.GroupID = &b.groupID
	}
}

// keepForDeadLetter gives a dead-letter copy the group-id and priority of
// the message it copies (contract section 5), and never its time to live or
// expiry, so that the copy does not expire.
func keepForDeadLetter(msg, src *amqp.Message) {
	if msg.Header != nil {
		msg.Header.TTL = 0
		if src.Header != nil {
			msg.Header.Priority = src.Header.Priority
		}
	}
	if msg.Properties != nil {
		msg.Properties.AbsoluteExpiryTime = nil
		if src.Properties != nil && src.Properties.GroupID != nil {
			g := *src.Properties.GroupID
			msg.Properties.GroupID = &g
		}
	}
}

// The usual property values, boxed once: putting a string that is not a
// constant into an interface allocates, and every message carries these.
var (
	boxedSchemaVersion any = strconv.Itoa(SchemaVersion)
	boxedLang          any = Lang
	boxedAttempts          = func() (t [16]any) {
		for i := range t {
			t[i] = strconv.Itoa(i)
		}
		return t
	}()
)

func schemaVersionProperty(v int) any {
	if v == SchemaVersion {
		return boxedSchemaVersion
	}
	return strconv.Itoa(v)
}

func langProperty(lang string) any {
	if lang == Lang {
		return boxedLang
	}
	return lang
}

func attemptsProperty(n int) any {
	if n >= 0 && n < len(boxedAttempts) {
		return boxedAttempts[n]
	}
	return strconv.Itoa(n)
}
