package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The statuses a registry.json entry may have. The family's registry
// (bqschema) writes "active"; an entry without a status is active.
const (
	// StatusActive: the URN is in use; its schema checks both sides.
	StatusActive = "active"
	// StatusDeprecated: the URN still works and its schema checks both
	// sides; Registry.Warnings names it, so that its producers move on.
	StatusDeprecated = "deprecated"
	// StatusRetired: no new message may carry the URN. PublishOption
	// refuses it whatever the data; a consumer still checks the messages
	// already queued against its schema, so they drain.
	StatusRetired = "retired"
)

// Entry is what a registry.json says of one URN.
type Entry struct {
	// URN is the message URN the schema is for (the file's path plays no
	// part in it).
	URN string `json:"urn"`
	// Schema is the schema file, relative to the folder of registry.json.
	Schema string `json:"schema"`
	// Owner is the team or service that owns the URN.
	Owner string `json:"owner,omitempty"`
	// Status is StatusActive, StatusDeprecated or StatusRetired ("" is
	// active).
	Status string `json:"status,omitempty"`
}

// RegistryFile reads the family's schema registry manifest, registry.json:
//
//	{"schemas": [{"urn": "urn:babel:orders:created", "schema": "schemas/orders-created.json",
//	              "owner": "orders", "status": "active"}]}
//
// Each entry's URN is the one it names; its schema file is read relative
// to the manifest's folder, and may $ref another schema of the registry
// by its path relative to itself. An entry without a URN or a schema path,
// a URN named twice, a schema path that leaves the manifest's folder (by
// "..", or by a symbolic link or a linked directory leading outside it;
// the manifest itself is read the same way), or a status other than
// active, deprecated or retired makes New fail.
func RegistryFile(manifest string) Source {
	return Source{load: func(add func(schemaDoc) error) error {
		dir, name := filepath.Split(manifest)
		if dir == "" {
			dir = "."
		}
		return inFolder(dir, "schema registry "+manifest, func(fsys fs.FS) error { return loadManifest(fsys, name, manifest, add) })
	}}
}

// RegistryFS reads a registry.json at manifest in fsys, as RegistryFile
// does: for a service that embeds its registry.
func RegistryFS(fsys fs.FS, manifest string) Source {
	return Source{load: func(add func(schemaDoc) error) error {
		return loadManifest(fsys, manifest, manifest, add)
	}}
}

func loadManifest(fsys fs.FS, name, shown string, add func(schemaDoc) error) error {
	raw, err := fs.ReadFile(fsys, name)
	if err != nil {
		return fmt.Errorf("schema registry %s: %w", shown, err)
	}
	var m struct {
		Schemas *[]Entry `json:"schemas"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("schema registry %s: not a registry manifest: %w", shown, err)
	}
	if m.Schemas == nil {
		return fmt.Errorf(`schema registry %s: no "schemas" list`, shown)
	}
	base := path.Dir(name)
	for i, e := range *m.Schemas {
		where := fmt.Sprintf("schema registry %s: entry %d", shown, i+1)
		if strings.TrimSpace(e.URN) == "" {
			return fmt.Errorf("%s: no urn", where)
		}
		where += " (" + e.URN + ")"
		if strings.TrimSpace(e.Schema) == "" {
			return fmt.Errorf("%s: no schema path", where)
		}
		switch e.Status {
		case "", StatusActive, StatusDeprecated, StatusRetired:
		default:
			return fmt.Errorf("%s: status %q is not %s, %s or %s", where, e.Status, StatusActive, StatusDeprecated, StatusRetired)
		}
		p := path.Clean(path.Join(base, filepath.ToSlash(e.Schema)))
		if path.IsAbs(e.Schema) || filepath.IsAbs(e.Schema) || !fs.ValidPath(p) || !inside(base, p) {
			return fmt.Errorf("%s: schema %s is not a path inside the manifest's folder", where, e.Schema)
		}
		doc, err := fs.ReadFile(fsys, p)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		entry := e
		if err := add(schemaDoc{urn: e.URN, where: p, raw: doc, entry: &entry}); err != nil {
			return fmt.Errorf("schema registry %s: %w", shown, err)
		}
	}
	return nil
}

// inside reports whether the cleaned path p is in the folder dir ("." the
// root): a schema path with ".." may stay inside the fs.FS and still leave
// the manifest's folder.
func inside(dir, p string) bool {
	return dir == "." || strings.HasPrefix(p, dir+"/")
}

// Entry returns what the registry.json said of urn; false when no
// registry.json named it (a schema from Dir, FS or Bytes, or none).
func (r *Registry) Entry(urn string) (Entry, bool) {
	e, ok := r.entries[urn]
	return e, ok
}

// Warnings lists, sorted, each URN a registry.json marks deprecated or
// retired, in words an operator can act on (a service may log them at
// start-up; bqartemis-validate prints them).
func (r *Registry) Warnings() []string {
	var out []string
	for _, urn := range r.URNs() {
		e, ok := r.entries[urn]
		if !ok {
			continue
		}
		switch e.Status {
		case StatusDeprecated:
			out = append(out, fmt.Sprintf("%s is deprecated in the schema registry%s: its producers should move to its successor", urn, owner(e)))
		case StatusRetired:
			out = append(out, fmt.Sprintf("%s is retired in the schema registry%s: publishing it is refused, queued messages are still checked", urn, owner(e)))
		}
	}
	return out
}

func owner(e Entry) string {
	if e.Owner == "" {
		return ""
	}
	return " (owner " + e.Owner + ")"
}

// publishSide is the registry as the publish side's validator: a retired
// URN is refused before its data is looked at.
type publishSide struct{ *Registry }

func (p publishSide) ValidatePayload(ctx context.Context, urn string, data json.RawMessage) error {
	if e, ok := p.entries[urn]; ok && e.Status == StatusRetired {
		return &artemis.PayloadError{URN: urn, Violations: []artemis.PayloadViolation{{
			Message: "the URN is retired in the schema registry" + owner(e) + ": publish its successor",
		}}}
	}
	return p.Registry.ValidatePayload(ctx, urn, data)
}
