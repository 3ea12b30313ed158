package schema

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// decodeJSON turns data into the values the validator reads (numbers kept
// exact, as json.Number).
func decodeJSON(data []byte) (any, error) {
	return jsonschema.UnmarshalJSON(bytes.NewReader(data))
}

func jsonEncode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
