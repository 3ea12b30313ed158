package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The family's personal-data rule: a data schema marks the fields that
// carry personal data with the keyword x-gdpr-sensitive (true, or a
// category such as "email"; false and "" mark nothing). A producer
// encrypts each marked value and a consumer decrypts it, so that the
// broker, its DLQ and whoever browses them never see it; the envelope
// frame never changes.
const gdprKeyword = "x-gdpr-sensitive"

// marks is the tree of a schema's x-gdpr-sensitive fields, as the family
// walks it: a schema's properties (by name) and its items (each element
// of an array). A marked node is protected whole (a marked object or
// array is one encrypted value); nothing below it is looked at.
type marks struct {
	marked   bool
	category string
	props    map[string]*marks
	items    *marks
}

// schemaMarks reads the marks of one schema document. Besides the tree it
// returns where a mark sits that the family's walk cannot reach (under
// $defs, allOf, $ref targets, patternProperties ... or on the data object
// itself): such a field would travel in clear, so Encrypting refuses it.
func schemaMarks(doc []byte) (*marks, []string, error) {
	var root any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return nil, nil, err
	}
	reached := map[string]bool{}
	tree := walkMarks(root, "", reached)
	var all []string
	findMarks(root, "", false, &all)
	var stray []string
	for _, ptr := range all {
		if !reached[ptr] {
			stray = append(stray, ptr)
		}
	}
	if tree != nil && tree.marked {
		stray = append(stray, "(the data object itself)")
	}
	return tree, stray, nil
}

// isMark reports whether a keyword's value marks a field.
func isMark(v any) (bool, string) {
	switch v := v.(type) {
	case bool:
		return v, ""
	case string:
		return v != "", v
	}
	return false, ""
}

// walkMarks follows properties and items from a schema node, recording
// the JSON pointer of each mark it reaches; nil when nothing below is
// marked.
func walkMarks(s any, ptr string, reached map[string]bool) *marks {
	obj, ok := s.(map[string]any)
	if !ok {
		return nil
	}
	m := &marks{}
	if v, ok := obj[gdprKeyword]; ok {
		if marked, cat := isMark(v); marked {
			m.marked, m.category = true, cat
			reached[ptr+"/"+gdprKeyword] = true
		}
	}
	if props, ok := obj["properties"].(map[string]any); ok {
		for name, sub := range props {
			if c := walkMarks(sub, ptr+"/properties/"+escapePointer(name), reached); c != nil {
				if m.props == nil {
					m.props = map[string]*marks{}
				}
				m.props[name] = c
			}
		}
	}
	m.items = walkMarks(obj["items"], ptr+"/items", reached)
	if !m.marked && m.props == nil && m.items == nil {
		return nil
	}
	return m
}

// findMarks lists the pointer of every x-gdpr-sensitive keyword that
// marks, wherever it is (a member of properties is a field's name, not a
// keyword).
func findMarks(v any, ptr string, names bool, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			p := ptr + "/" + escapePointer(k)
			if !names && k == gdprKeyword {
				if marked, _ := isMark(sub); marked {
					*out = append(*out, p)
				}
				continue
			}
			findMarks(sub, p, !names && k == "properties", out)
		}
	case []any:
		for i, sub := range v {
			findMarks(sub, ptr+"/"+strconv.Itoa(i), false, out)
		}
	}
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// SensitiveFields lists the fields urn's schema marks x-gdpr-sensitive, in
// the family's notation ("email", "profile.full_name", "addresses[].line"),
// sorted, each with its category after a space when it has one ("email
// (email)"). A field under a marked one is not listed: the marked one is
// protected whole.
func (r *Registry) SensitiveFields(urn string) []string {
	var out []string
	var walk func(m *marks, path string)
	walk = func(m *marks, path string) {
		if m == nil {
			return
		}
		if m.marked && path != "" {
			if m.category != "" {
				out = append(out, path+" ("+m.category+")")
			} else {
				out = append(out, path)
			}
			return
		}
		for name, c := range m.props {
			walk(c, join(path, name))
		}
		walk(m.items, path+"[]")
	}
	walk(r.marks[urn], "")
	sort.Strings(out)
	return out
}

// Encrypting returns a copy of the registry whose PublishOption encrypts,
// after the data passed its schema, each field the schema of its URN
// marks x-gdpr-sensitive, and whose ConsumerOption decrypts them before
// the schema check and the handler: each marked value is JSON-encoded and
// replaced by c's ciphertext string (the family's format with
// AESGCMCipher); an absent field is skipped. A consumer leaves a marked
// value that is not a string as it is (it was not encrypted), and
// dead-letters a message whose value does not decrypt (artemis.ErrDecrypt,
// reason failed) with its data as it travelled.
//
// It fails when c is nil, or when a schema has a mark the family's walk
// (properties and items from the schema's root) does not reach: under
// $defs, allOf, patternProperties, a $ref's target, or on the data object
// itself. Such a field would travel in clear.
func (r *Registry) Encrypting(c Cipher) (*Registry, error) {
	if c == nil {
		return nil, errors.New("schema: Encrypting needs a Cipher")
	}
	var problems []string
	for _, urn := range r.URNs() {
		for _, ptr := range r.strayMarks[urn] {
			problems = append(problems, fmt.Sprintf("%s: %s at %s is not under properties or items from the schema's root: the field would travel in clear", urn, gdprKeyword, ptr))
		}
	}
	if len(problems) > 0 {
		return nil, errors.New("schema: " + strings.Join(problems, "; "))
	}
	cp := *r
	cp.cipher = &fieldCipher{c}
	return &cp, nil
}

// ProtectPayload encrypts the marked fields of data (artemis.PayloadProtector:
// the publish side, after ValidatePayload passed). Without a cipher, or
// for a URN without marks, it returns data.
func (r *Registry) ProtectPayload(urn string, data json.RawMessage) (json.RawMessage, error) {
	m := r.marks[urn]
	if r.cipher == nil || m == nil {
		return data, nil
	}
	out, _, err := transform(data, m, "", r.cipher.encryptField)
	return out, err
}

// UnprotectPayload decrypts the marked fields of data
// (artemis.PayloadProtector: the consume side, before ValidatePayload).
// An error matches artemis.ErrDecrypt and names the field, never its
// value.
func (r *Registry) UnprotectPayload(urn string, data json.RawMessage) (json.RawMessage, error) {
	m := r.marks[urn]
	if r.cipher == nil || m == nil {
		return data, nil
	}
	out, _, err := transform(data, m, "", r.cipher.decryptField)
	return out, err
}

// fieldOp rewrites one marked value; keep reports that it is left as it is.
type fieldOp func(path string, v json.RawMessage) (out json.RawMessage, keep bool, err error)

// transform applies op to each value of data that m marks, keeping every
// other byte's meaning and the members' order.
func transform(data json.RawMessage, m *marks, path string, op fieldOp) (json.RawMessage, bool, error) {
	if m.marked {
		out, keep, err := op(path, data)
		if err != nil || keep {
			return data, false, err
		}
		return out, true, nil
	}
	data = bytes.TrimSpace(data)
	switch {
	case m.props != nil && len(data) > 0 && data[0] == '{':
		return transformObject(data, m, path, op)
	case m.items != nil && len(data) > 0 && data[0] == '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(data, &elems); err != nil {
			return nil, false, fmt.Errorf("schema: %s: not JSON", orRoot(path))
		}
		changed := false
		for i, e := range elems {
			out, ch, err := transform(e, m.items, path+"["+strconv.Itoa(i)+"]", op)
			if err != nil {
				return nil, false, err
			}
			elems[i], changed = out, changed || ch
		}
		if !changed {
			return data, false, nil
		}
		b, err := json.Marshal(elems)
		return b, true, err
	}
	return data, false, nil // absent, or not the shape the schema says: nothing to do
}

func transformObject(data json.RawMessage, m *marks, path string, op fieldOp) (json.RawMessage, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, false, fmt.Errorf("schema: %s: not JSON", orRoot(path))
	}
	var b bytes.Buffer
	b.WriteByte('{')
	changed := false
	for n := 0; dec.More(); n++ {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil, false, fmt.Errorf("schema: %s: not JSON", orRoot(path))
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false, fmt.Errorf("schema: %s: not JSON", orRoot(path))
		}
		if c := m.props[key]; c != nil {
			out, ch, err := transform(v, c, join(path, key), op)
			if err != nil {
				return nil, false, err
			}
			v, changed = out, changed || ch
		}
		if n > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	if !changed {
		return data, false, nil
	}
	b.WriteByte('}')
	return b.Bytes(), true, nil
}

func orRoot(path string) string {
	if path == "" {
		return "the data object"
	}
	return path
}

// fieldCipher is the Cipher as the transform's two operations.
type fieldCipher struct{ Cipher }

// encryptField replaces a value by the ciphertext of its JSON text
// (members sorted, as the Go core's encoding/json writes it; numbers as
// written).
func (c *fieldCipher) encryptField(path string, v json.RawMessage) (json.RawMessage, bool, error) {
	var val any
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&val); err != nil {
		return nil, false, fmt.Errorf("schema: %s: not JSON", path)
	}
	plain, err := json.Marshal(val)
	if err != nil {
		return nil, false, fmt.Errorf("schema: %s: %w", path, err)
	}
	ct, err := c.Encrypt(plain)
	if err != nil {
		return nil, false, &fieldError{path: path, what: "the cipher failed to encrypt it", err: err}
	}
	out, err := json.Marshal(ct)
	return out, false, err
}

// decryptField restores a value from its ciphertext; a value that is not
// a string was not encrypted and is kept.
func (c *fieldCipher) decryptField(path string, v json.RawMessage) (json.RawMessage, bool, error) {
	var s string
	if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return nil, true, nil
	}
	plain, err := c.Decrypt(s)
	if err != nil {
		return nil, false, &fieldError{decrypt: true, path: path, what: "the cipher could not decrypt it", err: err}
	}
	var out bytes.Buffer
	if err := json.Compact(&out, plain); err != nil {
		// Not the parser's message: it quotes the plaintext.
		return nil, false, &fieldError{decrypt: true, path: path, what: "it does not decrypt to a JSON value"}
	}
	return out.Bytes(), false, nil
}

// fieldError is a protected field that could not be encrypted or
// decrypted: it names the field, never its value or a key; the cipher's
// own error is reachable with errors.As but not in the text.
type fieldError struct {
	decrypt    bool
	path, what string
	err        error
}

func (e *fieldError) Error() string {
	if e.decrypt {
		return artemis.ErrDecrypt.Error() + ": " + e.path + ": " + e.what
	}
	return "schema: the protected field " + e.path + ": " + e.what
}

// Is matches artemis.ErrDecrypt for a field that could not be decrypted.
func (e *fieldError) Is(target error) bool { return e.decrypt && target == artemis.ErrDecrypt }

func (e *fieldError) Unwrap() error { return e.err }
