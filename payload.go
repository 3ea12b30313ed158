package artemis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// PayloadValidator checks the data object of a message against the schema
// registered for its URN. It is the seam a JSON Schema validator plugs
// into: the library itself carries none, so that its go.mod stays small;
// the module github.com/babelqueue/babelqueue-go-artemis/schema provides one
// (a registry of draft-07 and 2020-12 schemas per URN).
//
// ValidatePayload returns nil when data is valid or when no schema is
// registered for urn (the check is opt-in per URN). Otherwise it should
// return a *PayloadError listing each violation; any other error is taken
// as a violation of the data object as a whole. data is the data object's
// JSON as it travels ({} when the envelope has none); ValidatePayload must
// not keep or modify it. It is called from many goroutines at once.
//
// ctx is the publish's context, or on the consume side one that ends with
// the consume (Listen's context, Handle's): ValidatePayload returns by the
// time ctx ends, with ctx.Err() (or an error wrapping it), which the
// library never takes for a violation: the publish fails with it, and a
// delivery is given back to the broker unhandled.
type PayloadValidator interface {
	ValidatePayload(ctx context.Context, urn string, data json.RawMessage) error
}

// PayloadProtector is a PayloadValidator that also protects parts of the
// data object on the wire: the schema module encrypts the fields a schema
// marks x-gdpr-sensitive (the family's personal-data rule). Given to
// WithPayloadValidator, the data is validated as the caller wrote
// it, then ProtectPayload's result is what is sent; given to
// WithPayloadValidator, UnprotectPayload runs first, then the check and the
// handler see its result, while a dead-letter copy keeps the data as it
// travelled. The envelope around the data never changes.
//
// Both return data itself when there is nothing to do, and must not keep
// or modify it. An error names a field, never a value or a key: from
// UnprotectPayload it should match ErrDecrypt (the library makes it so
// when it does not).
type PayloadProtector interface {
	PayloadValidator
	ProtectPayload(urn string, data json.RawMessage) (json.RawMessage, error)
	UnprotectPayload(urn string, data json.RawMessage) (json.RawMessage, error)
}

// protectPayload is what a publish sends of env: env itself, or a copy
// whose data v protected.
func protectPayload(v PayloadValidator, env *Envelope) (*Envelope, error) {
	p, ok := v.(PayloadProtector)
	if !ok {
		return env, nil
	}
	data := env.Data
	if len(data) == 0 {
		data = emptyData
	}
	out, err := p.ProtectPayload(env.URN, data)
	if err != nil {
		return nil, fmt.Errorf("protecting the data of %s: %w", env.URN, err)
	}
	if bytes.Equal(out, data) {
		return env, nil
	}
	cp := *env
	cp.Data = out
	return &cp, nil
}

// PayloadViolation is one way a data object fails its schema.
type PayloadViolation struct {
	// Pointer is the JSON pointer (RFC 6901) of the failing value within
	// the data object: "" is the object itself, "/order_id" its member
	// order_id.
	Pointer string
	// Message says what the schema wants ("must be >= 1").
	Message string
}

// String is "/order_id: must be >= 1" ("(root): ..." for the data object
// itself).
func (v PayloadViolation) String() string {
	p := v.Pointer
	if p == "" {
		p = "(root)"
	}
	return p + ": " + v.Message
}

// PayloadError reports a data object that failed its schema. It matches
// ErrInvalidPayload.
type PayloadError struct {
	// URN is the message URN whose schema was checked.
	URN string
	// Violations lists each failure, in the validator's order.
	Violations []PayloadViolation
	// Err is the validator's own error when it returned one that is not a
	// *PayloadError (Violations then holds its text at the root).
	Err error
}

// Error is "artemis: invalid payload for URN: /a: ...; /b: ...".
func (e *PayloadError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalidPayload.Error())
	if e.URN != "" {
		b.WriteString(" for ")
		b.WriteString(e.URN)
	}
	for i, v := range e.Violations {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(v.String())
	}
	return b.String()
}

// Is matches ErrInvalidPayload.
func (e *PayloadError) Is(target error) bool { return target == ErrInvalidPayload }

// Unwrap returns the validator's own error, if any.
func (e *PayloadError) Unwrap() error { return e.Err }

// emptyData is what a publish writes for an envelope without data.
var emptyData = json.RawMessage("{}")

// checkPayload runs v on data and returns a *PayloadError, nil, or ctx's
// error (never wrapped in a *PayloadError) when ctx ended before or during
// the check.
func checkPayload(ctx context.Context, v PayloadValidator, urn string, data json.RawMessage) error {
	if len(data) == 0 {
		data = emptyData
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := v.ValidatePayload(ctx, urn, data)
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return err
	}
	var pe *PayloadError
	if errors.As(err, &pe) {
		if pe.URN == "" {
			cp := *pe
			cp.URN = urn
			return &cp
		}
		return pe
	}
	return &PayloadError{URN: urn, Violations: []PayloadViolation{{Message: err.Error()}}, Err: err}
}
