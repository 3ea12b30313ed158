package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The hostile shapes of data, each beside an ordinary data object of its
// size, for the check's bounds: TestHostilePayloads holds what each costs
// (in bytes allocated, which a loaded machine does not change) and
// BenchmarkHostile measures it in time.

const ordersURN = "urn:babel:orders:placed"

// ordersSchema has a rule for every hostile shape: integers with a
// minimum, numbers with a multipleOf, a string with a pattern, and a
// recursive tree.
const ordersSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["order_id", "lines"],
  "properties": {
    "order_id": {"type": "integer", "minimum": 1},
    "note": {"type": "string", "pattern": "^[A-Za-z0-9 .,-]*$"},
    "lines": {"type": "array", "items": {
      "type": "object",
      "required": ["sku", "qty", "price"],
      "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"},
        "qty": {"type": "integer", "minimum": 1},
        "price": {"type": "number", "minimum": 0, "multipleOf": 0.01}
      }
    }},
    "tree": {"$ref": "#/$defs/node"}
  },
  "$defs": {"node": {"type": "array", "items": {"$ref": "#/$defs/node"}}}
}`

func ordersRegistry(t testing.TB) *Registry {
	t.Helper()
	reg, err := New(Bytes(ordersURN, []byte(ordersSchema)))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// orderLines is an order of n lines, with qty and price as given.
func orderLines(n int, qty, price string) string {
	var b strings.Builder
	b.WriteString(`{"order_id":1042,"lines":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"ABC-%d","qty":%s,"price":%s}`, 1000+i%9000, qty, price)
	}
	b.WriteString(`]}`)
	return b.String()
}

// ordinaryOrder is a valid order of at least size bytes, with ordinary
// numbers: what a hostile shape's cost is compared with.
func ordinaryOrder(size int) string {
	one := len(orderLines(2, "12", "1234.5")) - len(orderLines(1, "12", "1234.5"))
	n := max(1, (size-len(orderLines(0, "", "")))/one)
	for len(orderLines(n, "12", "1234.5")) < size {
		n++
	}
	return orderLines(n, "12", "1234.5")
}

// tree is n arrays nested depth deep side by side, with leaf at the bottom
// of each.
func tree(n, depth int, leaf string) string {
	one := strings.Repeat("[", depth) + leaf + strings.Repeat("]", depth)
	return `{"order_id":1,"lines":[],"tree":[` + strings.TrimSuffix(strings.Repeat(one+",", n), ",") + `]}`
}

type hostile struct {
	name string
	data string
	// refused is the violation the check answers with ("" when the data is
	// within the bounds, and checked).
	refused string
}

func digits(n int) string { return strings.Repeat("7", n) }

// hostileShapes are the shapes the check's bounds are about: beyond them,
// refused before the validator sees them; at them, checked at a bounded
// cost.
var hostileShapes = []hostile{
	// 56 bytes: two numbers of a million digits each for the validator.
	{"huge-exponents", `{"order_id":1e999999,"lines":[],"note":"","n":-1e999999}`,
		"/order_id: is a number whose exponent is beyond the payload check's bound (e+400 or e-400)"},
	// An order of 14 lines whose every number has a huge exponent.
	{"huge-exponent-lines", orderLines(10, "1e999999", "1E+999999"),
		"/lines/0/qty: is a number whose exponent is beyond the payload check's bound (e+400 or e-400)"},
	{"many-huge-exponents", orderLines(100, "1", "1e-999999"),
		"/lines/0/price: is a number whose exponent is beyond the payload check's bound (e+400 or e-400)"},
	{"long-digits", `{"order_id":` + digits(5000) + `,"lines":[]}`,
		"/order_id: is a number of more digits than the payload check's bound (400)"},
	{"deep-nesting", tree(1, 5000, ""),
		"/tree" + strings.Repeat("/0", maxDepth) + fmt.Sprintf(": is nested deeper than the payload check's bound (%d objects or arrays)", maxDepth)},
	// Within the bounds: checked, at a bounded cost.
	{"exponents-at-the-bound", orderLines(40, "1e400", "1e-400"), ""},
	{"digits-at-the-bound", orderLines(4, digits(400), "0."+digits(399)), ""},
	{"digits-and-exponent-at-the-bound", orderLines(4, digits(400)+"e-400", digits(400)+"e400"), ""},
	{"long-string-with-pattern", `{"order_id":1,"lines":[],"note":"` + strings.Repeat("abc ", 25000) + `!"}`, ""},
	{"nesting-at-the-bound", tree(300, 31, ""), ""},
	{"failing-leaves-at-the-bound", tree(300, 30, "1"), ""},
	{"many-violations", orderLines(300, "0", "-1"), ""},
}

// allocated is the bytes allocated by n runs of f.
func allocated(n int, f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(n)
}

// maxAllocRatio is the most a hostile shape may allocate per check, as a
// multiple of an ordinary order of its size.
const maxAllocRatio = 12

// TestHostilePayloads: a data object beyond the check's bounds is refused
// with one violation at its pointer; one within them costs at most a small
// multiple of an ordinary order of its size. Cost is counted in bytes
// allocated (the validator's big numbers and error paths are allocations),
// which a loaded machine does not change; BenchmarkHostile gives the time.
func TestHostilePayloads(t *testing.T) {
	reg := ordersRegistry(t)
	ctx := context.Background()
	for _, h := range hostileShapes {
		t.Run(h.name, func(t *testing.T) {
			data := []byte(h.data)
			err := reg.ValidatePayload(ctx, ordersURN, data)
			if h.refused != "" {
				var pe *artemis.PayloadError
				if !errors.As(err, &pe) || len(pe.Violations) != 1 {
					t.Fatalf("%d bytes: want the one violation %q, got %v", len(data), h.refused, err)
				}
				if got := pe.Violations[0].String(); got != h.refused {
					t.Fatalf("got %q\nwant %q", got, h.refused)
				}
			}
			ordinary := []byte(ordinaryOrder(len(data)))
			if err := reg.ValidatePayload(ctx, ordersURN, ordinary); err != nil {
				t.Fatal(err)
			}
			h := allocated(3, func() { _ = reg.ValidatePayload(ctx, ordersURN, data) })
			o := allocated(3, func() { _ = reg.ValidatePayload(ctx, ordersURN, ordinary) })
			t.Logf("%d bytes: %d bytes allocated per check, an ordinary order of %d bytes %d (%.2fx)", len(data), h, len(ordinary), o, float64(h)/float64(o))
			if h > maxAllocRatio*o {
				t.Errorf("%d bytes allocated per check, more than %d times an ordinary order of its size (%d)", h, maxAllocRatio, o)
			}
		})
	}
}

// slowOrder is a valid order of about size bytes with its last line
// invalid: a check that runs to its end answers with one violation, so an
// answer of ctx's error shows the call returned before the check was done.
func slowOrder(size int) []byte {
	o := ordinaryOrder(size)
	return []byte(strings.TrimSuffix(o, `}]}`) + `},{"sku":"ABC-1","qty":0,"price":1}]}`)
}

// TestValidatePayloadEndsWithItsContext: a check of a large data object
// returns ctx's error once ctx ends, not its result, and with a context
// that ended before it does not start.
func TestValidatePayloadEndsWithItsContext(t *testing.T) {
	reg := ordersRegistry(t)
	data := slowOrder(2 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := reg.ValidatePayload(ctx, ordersURN, data)
	t.Logf("%d bytes: returned after %v with %v", len(data), time.Since(start), err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's error", err)
	}
	if errors.Is(err, artemis.ErrInvalidPayload) {
		t.Fatalf("a check cut short is not a violation: %v", err)
	}
	if err := reg.ValidatePayload(ctx, ordersURN, []byte(`{}`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a context that had ended: %v", err)
	}
	// Uncut, the same data has its one violation.
	err = reg.ValidatePayload(context.Background(), ordersURN, data)
	if got := violationTexts(err); len(got) != 1 || !strings.HasSuffix(got[0], "/qty: must be >= 1") {
		t.Fatalf("the whole check: %v", err)
	}
}

// TestConsumerGivesBackAMessageWhoseCheckOutlivedHandle: through the
// consumer, a check cut short by the end of Handle's context leaves the
// delivery released, neither handled nor dead-lettered.
func TestConsumerGivesBackAMessageWhoseCheckOutlivedHandle(t *testing.T) {
	reg := ordersRegistry(t)
	handled := false
	cons, err := artemis.NewConsumer(artemis.Handlers{ordersURN: func(context.Context, *artemis.Envelope, *amqp.Message) error {
		handled = true
		return nil
	}}, reg.ConsumerOption(), artemis.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	env, err := artemis.NewEnvelope(ordersURN, json.RawMessage(slowOrder(2<<20)))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := artemis.NewMessage(env)
	if err != nil {
		t.Fatal(err)
	}
	r := &acceptingReceiver{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := cons.Handle(ctx, r, msg); err != nil {
		t.Fatal(err)
	}
	if handled || r.other != 1 {
		t.Fatalf("handled %v, %d deliveries released or modified: want it released, unhandled", handled, r.other)
	}
}

// TestManyViolationsAreListedUpToTheirBound: a data object with thousands
// of failing values gets the first maxViolations by pointer and one that
// counts the rest, so its report stays small.
func TestManyViolationsAreListedUpToTheirBound(t *testing.T) {
	reg := ordersRegistry(t)
	err := reg.ValidatePayload(context.Background(), ordersURN, []byte(orderLines(3000, "0", "1")))
	var pe *artemis.PayloadError
	if !errors.As(err, &pe) {
		t.Fatalf("got %v", err)
	}
	if len(pe.Violations) != maxViolations+1 {
		t.Fatalf("%d violations listed, want %d and the count of the rest", len(pe.Violations), maxViolations)
	}
	if got, want := pe.Violations[maxViolations].String(), "(root): and 2900 more violations, not listed"; got != want {
		t.Errorf("last: %q, want %q", got, want)
	}
	if got := pe.Violations[0].String(); got != "/lines/0/qty: must be >= 1" {
		t.Errorf("first: %q", got)
	}
	t.Logf("the report of 3000 failing values: %d bytes", len(err.Error()))
	if n := len(err.Error()); n > 10000 {
		t.Errorf("the report is %d bytes", n)
	}
	err = reg.ValidatePayload(context.Background(), ordersURN, []byte(orderLines(maxViolations, "0", "1")))
	if !errors.As(err, &pe) || len(pe.Violations) != maxViolations || strings.Contains(err.Error(), "more violations") {
		t.Errorf("exactly %d violations are all listed: %v", maxViolations, err)
	}
}

// TestValidatorPanicReachesTheCaller: a validator that panics on its own
// goroutine (a data object of 1 KiB or more, under a context that can
// end) panics in the caller, where it would have inline: the consumer's
// recover makes it a failed attempt, and the process lives.
func TestValidatorPanicReachesTheCaller(t *testing.T) {
	broken := &Registry{schemas: map[string]*jsonschema.Schema{ordersURN: {Extensions: []jsonschema.SchemaExt{panicking{}}}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data := []byte(ordinaryOrder(4 << 10))
	defer func() {
		if p := recover(); p == nil {
			t.Fatal("no panic reached the caller")
		}
	}()
	_ = broken.ValidatePayload(ctx, ordersURN, data)
}

// panicking is a schema keyword whose validation panics.
type panicking struct{}

func (panicking) Validate(*jsonschema.ValidatorContext, any) { panic("validator bug") }

// TestChecksCutShortAreBoundedInNumber: a check cut short by its context
// keeps running on its goroutine, holding the decoded data (about ten
// times the data's size); callers that give up again and again (a publish
// retried with a short deadline) must not pile such checks up without
// bound. Sixteen checks are cut short one after the other while their
// validator is still at work: at most maxOrphans of them are left
// running, and a caller past that bound waits for its turn within its
// own context. Once the running ones end, a new check starts at once.
func TestChecksCutShortAreBoundedInNumber(t *testing.T) {
	b := &blocking{started: make(chan struct{}, 64), release: make(chan struct{})}
	reg := &Registry{schemas: map[string]*jsonschema.Schema{ordersURN: {Extensions: []jsonschema.SchemaExt{b}}}}
	data := []byte(ordinaryOrder(4 << 10))
	// The checks other tests cut short end first.
	waitFor(t, time.Minute, func() bool {
		orphans.mu.Lock()
		defer orphans.mu.Unlock()
		return orphans.n == 0
	})
	const callers = 16
	for i := range callers {
		ctx, cancel := context.WithCancel(context.Background())
		ret := make(chan error, 1)
		go func() { ret <- reg.ValidatePayload(ctx, ordersURN, data) }()
		select {
		case <-b.started:
		case err := <-ret:
			cancel()
			t.Fatalf("check %d returned %v before its context ended", i, err)
		case <-time.After(100 * time.Millisecond): // waiting for its turn
		}
		cancel()
		if err := <-ret; !errors.Is(err, context.Canceled) {
			t.Fatalf("check %d cut short: %v, want the context's error", i, err)
		}
	}
	running := b.running.Load()
	close(b.release)
	t.Logf("%d checks cut short one after the other: %d of them still running (bound %d)", callers, running, maxOrphans)
	if running > maxOrphans {
		t.Errorf("%d checks cut short still running, more than the bound %d", running, maxOrphans)
	}
	waitFor(t, time.Minute, func() bool { return b.running.Load() == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if err := reg.ValidatePayload(ctx, ordersURN, data); err != nil {
		t.Fatalf("a check after the others ended: %v", err)
	}
	t.Logf("a check after the others ended: %v", time.Since(start))
}

// blocking is a schema keyword whose validation waits for release, and
// counts the validations under way.
type blocking struct {
	started chan struct{}
	release chan struct{}
	running atomic.Int64
}

func (b *blocking) Validate(*jsonschema.ValidatorContext, any) {
	b.running.Add(1)
	defer b.running.Add(-1)
	b.started <- struct{}{}
	<-b.release
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v", limit)
		}
		time.Sleep(time.Millisecond)
	}
}
