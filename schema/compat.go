package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Change is one difference between two versions of a schema.
type Change struct {
	// URN is the URN whose schema changed, in a comparison of two
	// registries (CheckRegistryCompatibility); "" for two schemas.
	URN string
	// Path is where in the data object: "" the object itself,
	// "profile.full_name" a member of a member, "addresses[]" each element
	// of an array (the family registry's notation).
	Path string
	// What says what changed: `property "customer_id" is now required`.
	What string
}

// String is "path: what" (what alone at the data object itself), after
// "urn: " in a comparison of two registries.
func (c Change) String() string {
	s := c.What
	if c.Path != "" {
		s = c.Path + ": " + s
	}
	if c.URN != "" {
		s = c.URN + ": " + s
	}
	return s
}

// Compatibility is CheckCompatibility's verdict on a schema change.
type Compatibility struct {
	// Breaking lists, sorted, each way the new schema may refuse data the
	// old one took. Empty: the change is backward compatible, and the URN
	// may keep its name; otherwise the family's rule is to mint a new URN
	// (urn:babel:orders:created.v2) rather than change this one.
	Breaking []Change
	// Unchecked lists, sorted, keywords that differ but that the rules do
	// not compare ($ref, allOf, anyOf, oneOf, not, if/then/else,
	// patternProperties, format, ...): review them by hand.
	Unchecked []Change
}

// Compatible reports whether no breaking change was found.
func (c Compatibility) Compatible() bool { return len(c.Breaking) == 0 }

// CheckCompatibility compares two versions of one URN's data schema (JSON
// texts) by the family registry's backward-compatibility rules, those of
// its bqschema compat: data valid under the old schema must stay valid
// under the new one. Breaking: a type changed (integer to number widens,
// and is not), a property made required or a required one added, a
// property removed while additionalProperties is false,
// additionalProperties tightened (true or absent to false), an enum value
// removed or an enum added where any value was allowed, minLength or
// minimum tightened. This package also counts as breaking what bqschema
// does not look at but refuses old data all the same: a type constraint
// added where any type was allowed, const added or changed, maxLength,
// maximum, exclusiveMinimum, exclusiveMaximum, minItems, maxItems,
// minProperties or maxProperties tightened, a pattern or multipleOf added
// or changed, uniqueItems made true, items constrained where any element
// was allowed, additionalProperties given a schema where it was open.
// Compatible: a property added as optional, an enum widened, a constraint
// relaxed, a required property dropped, x-gdpr-sensitive, descriptions
// and examples. Text that is not a JSON object or boolean is an error.
func CheckCompatibility(oldSchema, newSchema []byte) (Compatibility, error) {
	o, err := decodeSchema(oldSchema)
	if err != nil {
		return Compatibility{}, fmt.Errorf("the old schema: %w", err)
	}
	n, err := decodeSchema(newSchema)
	if err != nil {
		return Compatibility{}, fmt.Errorf("the new schema: %w", err)
	}
	var c Compatibility
	compareSchemas("", o, n, &c)
	for _, l := range [][]Change{c.Breaking, c.Unchecked} {
		sort.Slice(l, func(i, j int) bool { return l[i].String() < l[j].String() })
	}
	return c, nil
}

// CheckRegistryCompatibility compares two versions of a registry.json (say,
// the main branch's and a pull request's): each URN of the old registry
// must still be in the new one (retire it with status "retired" rather
// than remove it), with a schema CheckCompatibility finds compatible. URNs
// the new registry adds are not compared. Each Change names its URN. A
// manifest that RegistryFile would refuse is an error.
func CheckRegistryCompatibility(oldManifest, newManifest string) (Compatibility, error) {
	read := func(manifest string) (map[string][]byte, []string, error) {
		texts := map[string][]byte{}
		var order []string
		dir, name := filepath.Split(manifest)
		if dir == "" {
			dir = "."
		}
		err := inFolder(dir, "schema registry "+manifest, func(fsys fs.FS) error {
			return loadManifest(fsys, name, manifest, func(d schemaDoc) error {
				if _, dup := texts[d.urn]; dup {
					return fmt.Errorf("%s: two schemas for one URN", d.urn)
				}
				texts[d.urn] = d.raw
				order = append(order, d.urn)
				return nil
			})
		})
		return texts, order, err
	}
	oldTexts, oldURNs, err := read(oldManifest)
	if err != nil {
		return Compatibility{}, err
	}
	newTexts, _, err := read(newManifest)
	if err != nil {
		return Compatibility{}, err
	}
	var c Compatibility
	for _, urn := range oldURNs {
		nt, ok := newTexts[urn]
		if !ok {
			c.Breaking = append(c.Breaking, Change{URN: urn, What: `removed from the registry (give it "status": "retired" instead)`})
			continue
		}
		one, err := CheckCompatibility(oldTexts[urn], nt)
		if err != nil {
			return Compatibility{}, fmt.Errorf("%s: %w", urn, err)
		}
		for _, l := range []struct{ from, to *[]Change }{{&one.Breaking, &c.Breaking}, {&one.Unchecked, &c.Unchecked}} {
			for _, ch := range *l.from {
				ch.URN = urn
				*l.to = append(*l.to, ch)
			}
		}
	}
	for _, l := range [][]Change{c.Breaking, c.Unchecked} {
		sort.Slice(l, func(i, j int) bool { return l[i].String() < l[j].String() })
	}
	return c, nil
}

func decodeSchema(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not one JSON value")
	}
	switch v.(type) {
	case map[string]any, bool:
		return v, nil
	}
	return nil, fmt.Errorf("a schema is a JSON object or a boolean, not %s", canonical(v))
}

// asObject is a schema as keywords: true (or nothing) is {}, false is
// {"not":{}}.
func asObject(s any) map[string]any {
	switch s := s.(type) {
	case map[string]any:
		return s
	case bool:
		if !s {
			return map[string]any{"not": map[string]any{}}
		}
	}
	return map[string]any{}
}

// uncompared are the keywords that constrain data but are not compared
// rule by rule; a difference in one is reported as unchecked.
var uncompared = []string{"$ref", "$dynamicRef", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
	"patternProperties", "propertyNames", "dependencies", "dependentRequired", "dependentSchemas",
	"prefixItems", "contains", "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems",
	"format", "contentEncoding", "contentMediaType", "$defs", "definitions"}

func compareSchemas(path string, oldS, newS any, c *Compatibility) {
	o, n := asObject(oldS), asObject(newS)
	breaks := func(format string, args ...any) {
		c.Breaking = append(c.Breaking, Change{Path: path, What: fmt.Sprintf(format, args...)})
	}
	if newS == false && oldS != false {
		breaks("the schema is now false: it refuses every value")
		return
	}
	for _, k := range uncompared {
		if ov, nv := o[k], n[k]; canonical(ov) != canonical(nv) {
			c.Unchecked = append(c.Unchecked, Change{Path: path, What: k + " changed: not compared by the rules, review it"})
		}
	}

	// A type no longer allowed refuses everything of it below: reported
	// once, not again for each keyword under it.
	if ot, nt := types(o["type"]), types(n["type"]); nt != nil {
		if ot == nil {
			breaks("type constraint added (%s) where any type was allowed", strings.Join(nt, ", "))
			return
		}
		var lost []string
		for _, t := range ot {
			if !slices.Contains(nt, t) && (t != "integer" || !slices.Contains(nt, "number")) {
				lost = append(lost, t)
			}
		}
		if len(lost) > 0 {
			if len(ot) == 1 && len(nt) == 1 {
				breaks("type changed %q → %q", ot[0], nt[0])
			} else {
				breaks("type %s no longer allowed", strings.Join(quoteAll(lost), ", "))
			}
			return
		}
	}

	oe, oHas := o["enum"].([]any)
	ne, nHas := n["enum"].([]any)
	switch {
	case nHas && !oHas:
		breaks("enum constraint added where any value was allowed")
	case nHas && oHas:
		allowed := map[string]bool{}
		for _, v := range ne {
			allowed[canonical(v)] = true
		}
		for _, v := range oe {
			if !allowed[canonical(v)] {
				breaks("enum value %s removed", canonical(v))
			}
		}
	}
	if nc, ok := n["const"]; ok {
		if oc, had := o["const"]; !had {
			breaks("const %s added", canonical(nc))
		} else if canonical(oc) != canonical(nc) {
			breaks("const changed %s → %s", canonical(oc), canonical(nc))
		}
	}
	for _, k := range []string{"minLength", "minimum", "exclusiveMinimum", "minItems", "minProperties"} {
		tightened(k, o[k], n[k], +1, breaks)
	}
	for _, k := range []string{"maxLength", "maximum", "exclusiveMaximum", "maxItems", "maxProperties"} {
		tightened(k, o[k], n[k], -1, breaks)
	}
	for _, k := range []string{"pattern", "multipleOf"} {
		if nv, ok := n[k]; ok && canonical(o[k]) != canonical(nv) {
			if _, had := o[k]; had {
				breaks("%s changed %s → %s", k, canonical(o[k]), canonical(nv))
			} else {
				breaks("%s %s added", k, canonical(nv))
			}
		}
	}
	if n["uniqueItems"] == true && o["uniqueItems"] != true {
		breaks("uniqueItems made true")
	}

	oldReq := map[string]bool{}
	for _, r := range strings1(o["required"]) {
		oldReq[r] = true
	}
	for _, r := range strings1(n["required"]) {
		if !oldReq[r] {
			breaks("property %q is now required", r)
		}
	}

	oap, nap := o["additionalProperties"], n["additionalProperties"]
	oOpen := oap == nil || oap == true
	switch {
	case nap == false && oap != false:
		breaks("additionalProperties tightened to false")
	case oOpen && isSchemaObject(nap):
		breaks("additionalProperties constrained by a schema where any property was allowed")
	case isSchemaObject(oap) && isSchemaObject(nap):
		compareSchemas(join(path, "*"), oap, nap, c)
	}
	oProps, _ := o["properties"].(map[string]any)
	nProps, _ := n["properties"].(map[string]any)
	for _, name := range sortedKeys(oProps) {
		if np, ok := nProps[name]; ok {
			compareSchemas(join(path, name), oProps[name], np, c)
			continue
		}
		switch {
		case nap == false:
			breaks("property %q removed while additionalProperties is false", name)
		case isSchemaObject(nap):
			compareSchemas(join(path, name), oProps[name], nap, c)
		}
	}

	oi, ni := o["items"], n["items"]
	switch {
	case oi == nil && isSchema(ni) && ni != true:
		breaks("items constrained where any element was allowed")
	case isSchema(oi) && isSchema(ni):
		compareSchemas(path+"[]", oi, ni, c)
	case canonical(oi) != canonical(ni):
		c.Unchecked = append(c.Unchecked, Change{Path: path, What: "items changed (tuple form): not compared by the rules, review it"})
	}
}

// tightened reports a bound k that a new schema added or moved inward
// (dir +1: a lower bound raised; -1: an upper bound lowered).
func tightened(k string, ov, nv any, dir int, breaks func(string, ...any)) {
	n, ok := boundOf(nv)
	if !ok {
		return
	}
	o, had := boundOf(ov)
	switch {
	case !had:
		breaks("%s %s added", k, canonical(nv))
	case (dir > 0 && n > o) || (dir < 0 && n < o):
		breaks("%s tightened %s → %s", k, canonical(ov), canonical(nv))
	}
}

func boundOf(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// types is the type keyword as a list, nil when there is none.
func types(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		return strings1(v)
	}
	return nil
}

func strings1(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func quoteAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

func isSchemaObject(v any) bool { _, ok := v.(map[string]any); return ok }

func isSchema(v any) bool { return isSchemaObject(v) || v == true || v == false }

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// join is the family's path notation: members joined by dots.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// canonical is a JSON value's text with object members sorted, so that
// two values compare by what they hold (an absent keyword reads as null).
func canonical(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
