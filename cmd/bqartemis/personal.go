package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Personal data in inspect and peek: the family's payload schemas mark the
// data fields that carry it x-gdpr-sensitive, and the SDKs encrypt them.
// Given the schemas (-schemas DIR, or -registry registry.json), inspect
// and peek list the marked fields each message carries, encrypted or in
// clear, and -mask prints the body with each marked value masked as the
// schema registry masks it: a string keeps its first character then "***",
// any other value is "***". The tool reads the marks only; it validates
// nothing and decrypts nothing.

// fieldMarks is the tree of a schema's marks: through properties and items
// from the root, as the family walks them; a marked field is one value.
type fieldMarks struct {
	marked bool
	props  map[string]*fieldMarks
	items  *fieldMarks
}

// personalFlags are inspect's and peek's flags for personal data.
type personalFlags struct {
	schemas, registry string
	mask              bool
	marks             map[string]*fieldMarks // by URN, after load
}

func (p *personalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.schemas, "schemas", "", "the payload schema `directory` (DIR/orders/created.json is urn:babel:orders:created's): list the x-gdpr-sensitive fields")
	fs.StringVar(&p.registry, "registry", "", "the schema registry's `registry.json`, instead of -schemas")
	fs.BoolVar(&p.mask, "mask", false, "print the body with each x-gdpr-sensitive value masked (first character and ***); needs -schemas or -registry")
}

// load reads the marks of the schemas given, if any.
func (p *personalFlags) load() error {
	switch {
	case p.schemas != "" && p.registry != "":
		return usagef("give -schemas DIR or -registry FILE, not both")
	case p.mask && p.schemas == "" && p.registry == "":
		return usagef("-mask needs -schemas DIR or -registry FILE: the personal-data marks are in the schemas")
	case p.schemas != "":
		return p.loadDir(p.schemas)
	case p.registry != "":
		return p.loadRegistry(p.registry)
	}
	return nil
}

func (p *personalFlags) add(urn, where string, doc []byte) error {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return fmt.Errorf("%s: not JSON: %w", where, err)
	}
	if p.marks == nil {
		p.marks = map[string]*fieldMarks{}
	}
	if m := walkFieldMarks(v); m != nil {
		p.marks[urn] = m
	}
	return nil
}

// loadDir reads every *.json below dir through an os.Root, as the schema
// module's Dir does: a symbolic link that leaves the folder, or any
// absolute one, is refused, so the marks come only from files inside it.
func (p *personalFlags) loadDir(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("schema directory %s: %w", dir, err)
	}
	defer func() { _ = root.Close() }() // a directory opened for reading: closing it reports nothing to act on
	fsys := root.FS()
	found := 0
	err = fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(name, ".json") {
			return err
		}
		doc, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		found++
		return p.add("urn:babel:"+strings.ReplaceAll(strings.TrimSuffix(name, ".json"), "/", ":"), filepath.Join(dir, name), doc)
	})
	if err == nil && found == 0 {
		err = fmt.Errorf("no *.json file")
	}
	if err != nil {
		return fmt.Errorf("schema directory %s: %w", dir, err)
	}
	return nil
}

func (p *personalFlags) loadRegistry(manifest string) error {
	raw, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	var m struct {
		Schemas []struct {
			URN    string `json:"urn"`
			Schema string `json:"schema"`
		} `json:"schemas"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("schema registry %s: not a registry manifest: %w", manifest, err)
	}
	base := filepath.Dir(manifest)
	root, err := os.OpenRoot(base)
	if err != nil {
		return fmt.Errorf("schema registry %s: %w", manifest, err)
	}
	defer func() { _ = root.Close() }() // a directory opened for reading: closing it reports nothing to act on
	fsys := root.FS()
	for i, e := range m.Schemas {
		clean := path.Clean(filepath.ToSlash(e.Schema))
		if e.URN == "" || e.Schema == "" || filepath.IsAbs(e.Schema) || !fs.ValidPath(clean) {
			return fmt.Errorf("schema registry %s: entry %d: want a urn and a schema path inside the manifest's folder", manifest, i+1)
		}
		where := filepath.Join(base, filepath.FromSlash(e.Schema))
		doc, err := fs.ReadFile(fsys, clean) // through the root: a link out of the folder is refused
		if err != nil {
			return fmt.Errorf("schema registry %s: %s: %w", manifest, e.URN, err)
		}
		if err := p.add(e.URN, where, doc); err != nil {
			return fmt.Errorf("schema registry %s: %s: %w", manifest, e.URN, err)
		}
	}
	return nil
}

// walkFieldMarks follows properties and items; nil when nothing is marked.
func walkFieldMarks(s any) *fieldMarks {
	obj, ok := s.(map[string]any)
	if !ok {
		return nil
	}
	m := &fieldMarks{}
	switch v := obj["x-gdpr-sensitive"].(type) {
	case bool:
		m.marked = v
	case string:
		m.marked = v != ""
	}
	if m.marked {
		return m
	}
	if props, ok := obj["properties"].(map[string]any); ok {
		for name, sub := range props {
			if c := walkFieldMarks(sub); c != nil {
				if m.props == nil {
					m.props = map[string]*fieldMarks{}
				}
				m.props[name] = c
			}
		}
	}
	m.items = walkFieldMarks(obj["items"])
	if m.props == nil && m.items == nil {
		return nil
	}
	return m
}

// personal is what a record says of its personal data.
type personal struct {
	Encrypted []string `json:"encrypted"` // marked fields holding a ciphertext (the family's format)
	Clear     []string `json:"clear"`     // marked fields holding anything else: personal data in clear
}

// apply lists the marked fields of r's data and, with -mask, masks them
// in r's body. A record that is no envelope, or of a URN without marks,
// is left as it is.
func (p *personalFlags) apply(r *record) {
	if r.env == nil && p.mask && p.marks != nil {
		p.maskLoose(r)
		return
	}
	if r.env == nil || p.marks == nil {
		return
	}
	m := p.marks[r.env.URN]
	if m == nil {
		return
	}
	var data any
	dec := json.NewDecoder(bytes.NewReader(r.env.Data))
	dec.UseNumber()
	if dec.Decode(&data) != nil {
		return
	}
	found := &personal{Encrypted: []string{}, Clear: []string{}}
	data = visitMarked(data, m, "", func(path string, v any) any {
		if s, ok := v.(string); ok && isCiphertext(s) {
			found.Encrypted = append(found.Encrypted, path)
		} else {
			found.Clear = append(found.Clear, path)
		}
		if p.mask {
			return maskValue(v)
		}
		return v
	})
	if len(found.Encrypted)+len(found.Clear) == 0 {
		return
	}
	sort.Strings(found.Encrypted)
	sort.Strings(found.Clear)
	r.Personal = found
	if !p.mask {
		return
	}
	masked, err := json.Marshal(data)
	if err != nil {
		return
	}
	cp := *r.env
	cp.Data = masked
	if body, err := cp.Encode(); err == nil {
		r.Body, r.Masked = body, true
	}
}

// withheld is the body -mask shows in place of one whose personal data it
// cannot find: not a JSON object, or of no URN it can tell; withheldText,
// its text, is what a raw body (a string) holds in its place.
const (
	withheldText = "(withheld by -mask: no envelope whose personal data can be found)"
	withheld     = `"` + withheldText + `"`
)

// maskLoose is -mask on a record that is no valid envelope (a gated
// forward, an envelope that fails validation, a poison record): its body
// and its raw body are read as JSON objects, and the marks of the record's
// URN and of the body's own job or urn are masked in its data; what cannot
// be read so is withheld.
func (p *personalFlags) maskLoose(r *record) {
	if len(r.Body) > 0 {
		// A JSON object masked, or withheld: no longer base64 either way.
		r.Body, r.BodyEncoding, r.Masked = p.maskText(r.Body, r.URN), "", true
	}
	if r.Raw != nil {
		raw := withheldText
		if r.RawEncoding == "" {
			if masked := p.maskText([]byte(*r.Raw), r.URN); string(masked) != withheld {
				raw = string(masked)
			}
		}
		r.Raw, r.RawEncoding, r.Masked = &raw, "", true
	}
}

// maskText is body, a JSON object, with the marked values of its data
// masked, or withheld.
func (p *personalFlags) maskText(body []byte, urn string) json.RawMessage {
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&obj) != nil || obj == nil {
		return json.RawMessage(withheld)
	}
	// A poison record holds the body it stood for in raw: a JSON string,
	// base64 (raw_encoding), or the JSON itself.
	switch raw := obj["raw"].(type) {
	case nil:
	case string:
		if _, b64 := obj["raw_encoding"]; b64 {
			obj["raw"] = json.RawMessage(withheld)
		} else {
			obj["raw"] = string(p.maskText([]byte(raw), urn))
		}
	default:
		b, _ := json.Marshal(raw)
		obj["raw"] = p.maskText(b, urn)
	}
	urns := []string{urn}
	for _, k := range []string{"job", "urn"} {
		if s, ok := obj[k].(string); ok {
			urns = append(urns, s)
		}
	}
	known := false
	for _, u := range urns {
		if u == "" {
			continue
		}
		known = true
		if m := p.marks[u]; m != nil {
			if data, ok := obj["data"]; ok {
				obj["data"] = visitMarked(data, m, "", func(_ string, v any) any { return maskValue(v) })
			}
		}
	}
	if !known && obj["raw"] == nil {
		return json.RawMessage(withheld)
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return json.RawMessage(withheld)
	}
	return out
}

// visitMarked calls fn on each marked value present in v and puts its
// result in the value's place.
func visitMarked(v any, m *fieldMarks, path string, fn func(string, any) any) any {
	if m.marked {
		return fn(path, v)
	}
	switch v := v.(type) {
	case map[string]any:
		for name, c := range m.props {
			if sub, ok := v[name]; ok {
				p := name
				if path != "" {
					p = path + "." + name
				}
				v[name] = visitMarked(sub, c, p, fn)
			}
		}
	case []any:
		if m.items != nil {
			for i, sub := range v {
				v[i] = visitMarked(sub, m.items, fmt.Sprintf("%s[%d]", path, i), fn)
			}
		}
	}
	return v
}

// isCiphertext tells the family's encrypted value: standard base64 of a
// 12-byte nonce, at least one byte and a 16-byte tag.
func isCiphertext(s string) bool {
	b, err := base64.StdEncoding.DecodeString(s)
	return err == nil && len(b) >= 12+1+16
}

// maskValue is the schema registry's mask.
func maskValue(v any) any {
	if s, ok := v.(string); ok && s != "" {
		r := []rune(s)
		return string(r[0]) + "***"
	}
	return "***"
}
