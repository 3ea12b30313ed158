package schema

import (
	"bytes"
	"fmt"
	"math/big"
	"strings"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// violations flattens a validation error into its leaves, one violation
// per failing value, in the validator's order. The messages say what the
// schema wants and never quote the value that failed (it is payload, and
// reports and logs must not carry payload); a property name is part of a
// pointer, not a value.
func violations(ve *jsonschema.ValidationError, out []artemis.PayloadViolation) []artemis.PayloadViolation {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			out = violations(c, out)
		}
		return out
	}
	loc := ve.InstanceLocation
	switch k := ve.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			out = append(out, artemis.PayloadViolation{Pointer: pointer(joinPath(loc, m)), Message: "is required"})
		}
		return out
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			out = append(out, artemis.PayloadViolation{Pointer: pointer(joinPath(loc, p)), Message: "is not allowed"})
		}
		return out
	case *kind.Dependency:
		for _, m := range k.Missing {
			out = append(out, artemis.PayloadViolation{Pointer: pointer(joinPath(loc, m)), Message: fmt.Sprintf("is required when %q is present", k.Prop)})
		}
		return out
	case *kind.DependentRequired:
		for _, m := range k.Missing {
			out = append(out, artemis.PayloadViolation{Pointer: pointer(joinPath(loc, m)), Message: fmt.Sprintf("is required when %q is present", k.Prop)})
		}
		return out
	}
	return append(out, artemis.PayloadViolation{Pointer: pointer(loc), Message: describe(ve.ErrorKind)})
}

// describe is what the schema wants, for a leaf error.
func describe(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return "must be " + strings.Join(k.Want, " or ") + ", not " + k.Got
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = literal(w)
		}
		if len(want) == 1 {
			return "must be " + want[0]
		}
		return "must be one of " + strings.Join(want, ", ")
	case *kind.Const:
		return "must be " + literal(k.Want)
	case *kind.Minimum:
		return "must be >= " + number(k.Want)
	case *kind.Maximum:
		return "must be <= " + number(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be > " + number(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be < " + number(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + number(k.Want)
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long", k.Want)
	case *kind.Pattern:
		return fmt.Sprintf("must match the pattern %q", k.Want)
	case *kind.Format:
		return fmt.Sprintf("must be a valid %s", k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items", k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d properties", k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d properties", k.Want)
	case *kind.UniqueItems:
		return fmt.Sprintf("must have unique items (items %d and %d are equal)", k.Duplicates[0], k.Duplicates[1])
	case *kind.FalseSchema:
		return "is not allowed"
	case *kind.Not:
		return "must not match the schema under not"
	case *kind.OneOf:
		return "must match exactly one schema under oneOf"
	case *kind.AnyOf:
		return "must match a schema under anyOf"
	case *kind.Contains:
		return "must contain an item that matches the schema under contains"
	case *kind.PropertyNames:
		return fmt.Sprintf("has a property name that the schema under propertyNames refuses: %q", k.Property)
	case *kind.AdditionalItems:
		return fmt.Sprintf("has %d more items than allowed", k.Count)
	case *kind.ContentEncoding:
		return fmt.Sprintf("must be %s encoded", k.Want)
	case *kind.ContentMediaType:
		return fmt.Sprintf("must be of media type %s", k.Want)
	}
	return k.LocalizedString(printer)
}

var printer = message.NewPrinter(language.English)

// number renders a schema's bound as it was written, when it can.
func number(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return fmt.Sprint(f)
}

// literal renders a schema value (an enum member, a const) as JSON.
func literal(v any) string {
	var b bytes.Buffer
	if err := jsonEncode(&b, v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
