// Package jsoncodec is the envelope's JSON codec, kept out of the way of a
// reader of the data path as go-amqp keeps its AMQP codec in
// internal/encoding: the one-pass scanner the decoder walks with (scan.go),
// the canonical writer (canonical.go), and the texts that say what is wrong
// with a body that is not JSON (describe.go). It knows JSON, not the
// envelope: the envelope's keys, types and errors are the artemis package's.
package jsoncodec
