// Package schema checks the data object of BabelQueue messages against a
// JSON Schema per URN, with a full validator (draft-07 and 2020-12, the
// official JSON-Schema-Test-Suite passes), and plugs into
// github.com/babelqueue/babelqueue-go-artemis through its PayloadValidator
// seam: on the publish side invalid data is refused before anything is
// sent, on the consume side it never reaches the handler.
//
//	//go:embed schemas
//	var schemaFiles embed.FS
//
//	reg, err := schema.New(schema.FS(schemaFiles, "schemas"))
//	pub := artemis.NewPublisher(sender, "orders", reg.PublishOption())
//	cons, err := artemis.NewConsumer(handlers, reg.ConsumerOption(), ...)
//
// The package is a module of its own so that the library's go.mod does not
// carry a validator nobody asked for.
package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// URNPrefix is the prefix of every BabelQueue URN (urn:babel:<domain>:<event>).
// A schema file's path below its directory names the rest: orders/created.json
// is the schema of urn:babel:orders:created.
const URNPrefix = "urn:babel:"

// Registry maps URNs to compiled JSON Schemas. It is built once by New and
// never changes after; it is safe for concurrent use. The zero Registry
// holds no schema (it checks nothing).
type Registry struct {
	schemas map[string]*jsonschema.Schema
	entries map[string]Entry // the URNs a registry.json named
	// marks: each URN's x-gdpr-sensitive fields; strayMarks: the marks
	// the family's walk does not reach; cipher: set by Encrypting.
	marks      map[string]*marks
	strayMarks map[string][]string
	cipher     *fieldCipher
}

// Source is one place New reads schemas from: Dir, FS, Bytes,
// RegistryFile or RegistryFS.
type Source struct {
	load func(add func(schemaDoc) error) error
}

// schemaDoc is one schema a Source found: its URN, where it was read
// (a path within the source, "" for Bytes), its text, and the registry
// entry that named it, if any.
type schemaDoc struct {
	urn, where string
	raw        []byte
	entry      *Entry
}

// Dir reads every *.json file below the directory dir (other files are
// skipped). A file's path below dir, without .json, with each / made a :,
// after the URNPrefix, is its URN: dir/orders/created.json is the schema of
// urn:babel:orders:created. A file may $ref another by its path relative to
// itself ("../shared/money.json#/$defs/amount"). Nothing outside dir is
// read: a symbolic link (or a path through a linked directory) that leads
// outside it is an error naming the path; one that stays inside is
// followed.
func Dir(dir string) Source {
	return Source{load: func(add func(schemaDoc) error) error {
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("schema directory: %w", err)
		}
		return inFolder(dir, "schema directory", func(fsys fs.FS) error { return loadFS(fsys, ".", dir, add) })
	}}
}

// FS reads every *.json file below dir in fsys, as Dir does: for a service
// that embeds its schemas (//go:embed schemas, then FS(files, "schemas")).
// dir "." is the root of fsys.
func FS(fsys fs.FS, dir string) Source {
	return Source{load: func(add func(schemaDoc) error) error {
		return loadFS(fsys, dir, dir, add)
	}}
}

// Bytes is the schema of one URN given as JSON text.
func Bytes(urn string, schema []byte) Source {
	return Source{load: func(add func(schemaDoc) error) error {
		return add(schemaDoc{urn: urn, raw: schema})
	}}
}

// loadFS reads the schemas below dir in fsys; shown is the folder its
// errors name.
func loadFS(fsys fs.FS, dir, shown string, add func(schemaDoc) error) error {
	found := 0
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".json") {
			return nil
		}
		rel := strings.TrimPrefix(p, dir+"/")
		if dir == "." {
			rel = p
		}
		doc, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		found++
		return add(schemaDoc{urn: URNPrefix + strings.ReplaceAll(strings.TrimSuffix(rel, ".json"), "/", ":"), where: rel, raw: doc})
	})
	if err != nil {
		return fmt.Errorf("schema directory %s: %w", shown, err)
	}
	if found == 0 {
		return fmt.Errorf("schema directory %s: no *.json file", shown)
	}
	return nil
}

// resourceBase is the made-up location schemas are compiled under: a $ref
// resolves among the loaded schemas (and the drafts' metaschemas) only,
// never on disk or on the network.
const resourceBase = "bq-schema:///"

// New loads and compiles the schemas of every source, once. A URN given
// twice, a file that is not JSON, a schema that does not compile (against
// the metaschema of its $schema: draft-07 or 2020-12; 2020-12 when it names
// none), a $ref to a schema that was not loaded, or a registry.json entry
// that is incomplete or has a status other than active, deprecated or
// retired is an error, and no Registry.
func New(sources ...Source) (*Registry, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	locs := map[string]string{} // URN -> its resource location
	added := map[string]bool{}  // the resource locations added (registry entries may share a file)
	entries := map[string]Entry{}
	type docMarks struct {
		tree  *marks
		stray []string
	}
	marksAt := map[string]docMarks{} // by resource location
	src, n := 0, 0                   // the source being loaded; the Bytes so far
	add := func(d schemaDoc) error {
		urn, where := d.urn, d.where
		if strings.TrimSpace(urn) == "" {
			return errors.New("a schema with a blank URN")
		}
		if _, dup := locs[urn]; dup {
			return fmt.Errorf("%s: two schemas for one URN", urn)
		}
		if where == "" {
			n++
			where = fmt.Sprintf("bytes/%d.json", n)
		} else {
			where = fmt.Sprintf("fs%d/%s", src, where)
		}
		loc := resourceBase + where
		if !added[loc] {
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(d.raw))
			if err != nil {
				return fmt.Errorf("%s: %s: not JSON: %w", urn, orBytes(d.where), err)
			}
			if err := c.AddResource(loc, v); err != nil {
				return fmt.Errorf("%s: %w", urn, err)
			}
			tree, stray, err := schemaMarks(d.raw)
			if err != nil {
				return fmt.Errorf("%s: %s: not JSON: %w", urn, orBytes(d.where), err)
			}
			marksAt[loc] = docMarks{tree, stray}
			added[loc] = true
		}
		locs[urn] = loc
		if d.entry != nil {
			entries[urn] = *d.entry
		}
		return nil
	}
	for i, s := range sources {
		src = i
		if s.load == nil {
			continue
		}
		if err := s.load(add); err != nil {
			return nil, err
		}
	}
	r := &Registry{schemas: make(map[string]*jsonschema.Schema, len(locs)), entries: entries,
		marks: map[string]*marks{}, strayMarks: map[string][]string{}}
	for urn, loc := range locs {
		if m := marksAt[loc]; m.tree != nil || m.stray != nil {
			r.marks[urn], r.strayMarks[urn] = m.tree, m.stray
		}
		sch, err := c.Compile(loc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", urn, err)
		}
		r.schemas[urn] = sch
	}
	return r, nil
}

func orBytes(where string) string {
	if where == "" {
		return "bytes"
	}
	return where
}

// noLoader refuses every location that was not loaded.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is not one of the loaded schemas", strings.TrimPrefix(url, resourceBase))
}

// Has reports whether urn has a schema.
func (r *Registry) Has(urn string) bool { return r.schemas[urn] != nil }

// URNs lists the URNs that have a schema, sorted.
func (r *Registry) URNs() []string {
	out := make([]string, 0, len(r.schemas))
	for urn := range r.schemas {
		out = append(out, urn)
	}
	sort.Strings(out)
	return out
}

// ValidatePayload checks data, the JSON of a data object, against the
// schema of urn: nil when it is valid or urn has no schema, else an
// *artemis.PayloadError (matching artemis.ErrInvalidPayload) with one
// violation per failing value, by JSON pointer ("/order_id: must be >= 1"),
// sorted by pointer.
// Text that is not JSON is one violation at the root; a value beyond the
// check's bounds (a number of more than 400 digits or an exponent beyond
// 400 either way, more than 32 levels of nesting) is one violation at its
// own pointer, and the validator never sees it.
//
// It returns ctx.Err() once ctx ends, even while the validator is still at
// work: a data object of 1 KiB or more is validated on a goroutine of its
// own, which finishes its bounded work in the background; a smaller one,
// whose check is bounded at under a millisecond, on the caller's. While
// two or more checks cut short still run in the background (see
// maxOrphans), a check of 1 KiB or more waits for one of them to end,
// within ctx, before it starts.
func (r *Registry) ValidatePayload(ctx context.Context, urn string, data json.RawMessage) error {
	sch := r.schemas[urn]
	if sch == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := ctx.Done()
	own := done != nil && len(data) >= inlineMax // validated on a goroutine of its own
	if own && !orphans.wait(done) {
		return ctx.Err()
	}
	v, err := decodeJSON(data, done)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		var be *boundError
		if errors.As(err, &be) {
			return &artemis.PayloadError{URN: urn, Violations: []artemis.PayloadViolation{{Pointer: be.pointer(), Message: be.msg}}}
		}
		return &artemis.PayloadError{URN: urn, Violations: []artemis.PayloadViolation{{Message: "not JSON: " + err.Error()}}}
	}
	if !own {
		return validate(sch, urn, v)
	}
	// v holds no reference to data: the caller's bytes are not read after
	// the return.
	res := make(chan validated, 1)
	job := new(orphan)
	go func() {
		defer orphans.end(job)
		defer func() {
			if p := recover(); p != nil {
				res <- validated{panicked: p}
			}
		}()
		res <- validated{err: validate(sch, urn, v)}
	}()
	select {
	case r := <-res:
		if r.panicked != nil {
			// Where it would have been inline: the caller's recover (the
			// consumer's: a failed attempt) sees it, and a panic after
			// the caller left does not take the process down.
			panic(r.panicked)
		}
		return r.err
	case <-done:
		orphans.leave(job)
		return ctx.Err()
	}
}

// maxOrphans bounds the checks cut short by their context that are still
// running (each holds its decoded data, about ten times the data's size,
// and a processor): once that many are, a check of 1 KiB or more waits,
// within its context, until one of them ends. A caller that gives up again
// and again (a publish retried with a short deadline) then stops piling
// work up; at most maxOrphans plus the checks whose callers are still
// waiting run at once.
const maxOrphans = 2

// orphans counts the checks whose caller left before they ended.
var orphans = orphanage{wake: make(chan struct{})}

type orphanage struct {
	mu   sync.Mutex
	n    int           // checks running whose caller left
	wake chan struct{} // closed (and replaced) when n drops
}

// orphan is one check on a goroutine of its own.
type orphan struct {
	left, ended bool // guarded by orphanage.mu
}

// wait returns once fewer than maxOrphans checks cut short are running
// (true), or when done closes first (false).
func (o *orphanage) wait(done <-chan struct{}) bool {
	for {
		o.mu.Lock()
		if o.n < maxOrphans {
			o.mu.Unlock()
			return true
		}
		wake := o.wake
		o.mu.Unlock()
		select {
		case <-wake:
		case <-done:
			return false
		}
	}
}

// leave records that the caller of job left before the check ended.
func (o *orphanage) leave(job *orphan) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !job.ended {
		job.left = true
		o.n++
	}
}

// end records that job's check ended.
func (o *orphanage) end(job *orphan) {
	o.mu.Lock()
	defer o.mu.Unlock()
	job.ended = true
	if job.left {
		o.n--
		close(o.wake)
		o.wake = make(chan struct{})
	}
}

// validated is the result of a validation on a goroutine of its own.
type validated struct {
	err      error
	panicked any
}

// inlineMax is the size from which a data object is validated on a
// goroutine of its own, so that the call can return when its context
// ends. Below it the validation runs on the caller's goroutine: the
// check's bounds (decode.go) keep it under a millisecond at this size,
// where the hand-off would double the cost of a small message's check
// (BenchmarkCheck: about 5 us, against 10 with a goroutine), and above it
// the hand-off is a tenth of the check or less.
const inlineMax = 1 << 10

// validate checks v, a decoded data object, against sch.
func validate(sch *jsonschema.Schema, urn string, v any) error {
	err := sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &artemis.PayloadError{URN: urn, Violations: []artemis.PayloadViolation{{Message: err.Error()}}, Err: err}
	}
	out := violations(ve, nil)
	// By pointer: the validator walks properties in map order, and a
	// report, a dead-letter record or a test should read the same twice.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Pointer < out[j].Pointer })
	if len(out) > maxViolations {
		more := len(out) - maxViolations
		out = append(out[:maxViolations:maxViolations], artemis.PayloadViolation{Message: fmt.Sprintf("and %d more violations, not listed", more)})
	}
	return &artemis.PayloadError{URN: urn, Violations: out}
}

// maxViolations is the most violations a PayloadError lists: its text goes
// into logs, reports and the dead-letter record, and a data object of many
// failing values (ten thousand lines of a bad quantity) would otherwise
// make each of them as large as the data.
const maxViolations = 100

// PublishOption is artemis.WithPayloadValidator with r: give it to
// artemis.NewPublisher or Client.Publisher to refuse invalid data before
// anything is sent. A URN its registry.json says is retired is refused
// too, whatever its data. On a registry from Encrypting, the fields its
// schemas mark x-gdpr-sensitive are then encrypted.
func (r *Registry) PublishOption() artemis.PublishOption {
	return artemis.WithPayloadValidator(publishSide{r})
}

// ConsumerOption is artemis.WithPayloadValidator(r): give it to
// artemis.NewConsumer so invalid data is dead-lettered before the handler.
// On a registry from Encrypting, the marked fields are decrypted first
// (the check and the handler read the cleartext; a value that does not
// decrypt is dead-lettered, artemis.ErrDecrypt).
func (r *Registry) ConsumerOption() artemis.ConsumerOption {
	return artemis.WithPayloadValidator(r)
}

// pointer is the JSON pointer (RFC 6901) of a value location.
func pointer(loc []string) string {
	var b strings.Builder
	for _, tok := range loc {
		b.WriteByte('/')
		tok = strings.ReplaceAll(tok, "~", "~0")
		b.WriteString(strings.ReplaceAll(tok, "/", "~1"))
	}
	return b.String()
}

func joinPath(loc []string, member string) []string {
	out := make([]string, len(loc), len(loc)+1)
	copy(out, loc)
	return append(out, member)
}
