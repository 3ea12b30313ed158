package artemis

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// poisonTextCases: each poison body and the error text it gets, which lands
// in dead_letter.error: the contract's words for what is wrong first, the
// detail after them.
var poisonTextCases = []struct {
	name, body, text string
}{
	{"plain_text", `hello world`,
		"the body is not valid JSON: at byte 1: invalid character 'h' looking for beginning of value"},
	{"bad_literal", `{"job":tru}`,
		"the body is not valid JSON: at byte 11: invalid character '}' in literal true (expecting 'e')"},
	{"truncated", `{"job":"urn:a:b"`,
		"the body is not valid JSON: at byte 16: unexpected end of JSON input (the body ends too early)"},
	{"trailing_garbage", `{"a":1} x`,
		"the body is not valid JSON: at byte 9: invalid character 'x' after top-level value"},
	{"empty", ``,
		"the body is not valid JSON: it is empty: unexpected end of JSON input"},
	{"whitespace", " \n",
		"the body is not valid JSON: it holds only whitespace: unexpected end of JSON input"},
	{"bom", "\xef\xbb\xbf{\"a\":1}",
		"the body is not valid JSON: at byte 1: it starts with a UTF-8 byte order mark (EF BB BF), which JSON text must not carry"},
	{"deep", strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		"the body is not valid JSON: at byte 10001: arrays and objects are nested more than 10000 levels deep"},
	{"invalid_utf8", "{\"job\":\"urn:a:\xffb\"}",
		"the body is not valid UTF-8: at byte 15"},
	{"array", `[{"job":"urn:a:b"}]`, "the body is JSON but not an object: it is an array"},
	{"string", `"urn:a:b"`, "the body is JSON but not an object: it is a string"},
	{"number", `1042`, "the body is JSON but not an object: it is a number"},
	{"null", `null`, "the body is JSON but not an object: it is null"},
	{"schema_version_2", envelopeWith("meta", metaWith(`2`)), "meta.schema_version is 2, want 1"},
	{"schema_version_string", envelopeWith("meta", metaWith(`"1"`)), `meta.schema_version is "1", want 1`},
	{"schema_version_float", envelopeWith("meta", metaWith(`1.0`)), "meta.schema_version is 1.0, want 1"},
	{"schema_version_missing", envelopeWith("meta", `{"id":"m","queue":"q","lang":"go","created_at":1}`), "meta.schema_version is missing, want 1"},
	{"meta_missing", envelopeWith("meta", ``), "meta is not an object: it is missing"},
	{"meta_array", envelopeWith("meta", `[1]`), "meta is not an object: it is [1]"},
	{"urn_missing", envelopeWith("job", ``), "the URN (job, else urn) is missing or blank"},
	{"urn_blank", envelopeWith("job", `"  "`), "the URN (job, else urn) is missing or blank"},
	{"urn_number", envelopeWith("job", `42`), "the URN (job, else urn) is not a string: job is 42"},
	{"data_missing", envelopeWith("data", ``), "data is not an object: it is missing"},
	{"data_array", envelopeWith("data", `[1,2]`), "data is not an object: it is [1,2]"},
	{"data_null", envelopeWith("data", `null`), "data is not an object: it is null"},
	{"attempts_negative", envelopeWith("attempts", `-1`), "attempts is not an integer >= 0: it is -1"},
	{"attempts_fraction", envelopeWith("attempts", `1.5`), "attempts is not an integer >= 0: it is 1.5"},
	{"attempts_missing", envelopeWith("attempts", ``), "attempts is not an integer >= 0: it is missing"},
	{"trace_id_missing", envelopeWith("trace_id", ``), "trace_id is missing or blank"},
	{"trace_id_blank", envelopeWith("trace_id", `" "`), "trace_id is missing or blank"},
	{"trace_id_number", envelopeWith("trace_id", `7`), "trace_id is not a string: 7"},
	{"duplicate_job", strings.Replace(contractExample, `"attempts":0`, `"attempts":0,"job":"urn:x:y"`, 1),
		`the body is JSON but not an envelope: duplicate key "job"`},
	{"duplicate_meta_id", strings.Replace(contractExample, `"schema_version":1`, `"schema_version":1,"id":"x"`, 1),
		"the body is JSON but not an envelope: duplicate key meta.id"},
}

// poisonCause is what the consumer finds wrong with a body: Decode's error,
// else Validate's.
func poisonCause(body string) error {
	env, err := decodeString(body)
	if err == nil {
		err = env.Validate()
	}
	return err
}

func TestPoisonTexts(t *testing.T) {
	dir := filepath.Join("testdata", "poison", "errors")
	var names []string
	for _, tc := range poisonTextCases {
		names = append(names, tc.name)
		t.Run(tc.name, func(t *testing.T) {
			err := poisonCause(tc.body)
			if !errors.Is(err, ErrInvalidEnvelope) {
				t.Fatalf("error %v does not wrap ErrInvalidEnvelope", err)
			}
			want := ErrInvalidEnvelope.Error() + ": " + tc.text
			if err.Error() != want {
				t.Errorf("error\n got: %s\nwant: %s", err, want)
			}
			// Decode's own path says the same as the consumer's.
			if _, derr := Decode([]byte(tc.body)); derr != nil && derr.Error() != err.Error() {
				t.Errorf("Decode says %q, decodeString %q", derr, err)
			}
			if tc.name == "deep" {
				return // 20 kB of brackets: the text is pinned above
			}
			// The poison record as the consumer writes it to the DLQ.
			dl := newDeadLetter(ReasonPoison, err, "orders", 0, time.UnixMilli(1749132730000))
			dl.Exception = nil
			assertGolden(t, filepath.Join(dir, tc.name+".json"), poisonRecord(tc.body, dl))
		})
	}
	assertNoOrphanGoldens(t, dir, ".json", names)
}
