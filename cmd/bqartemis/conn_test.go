package main

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
)

// stallingBroker answers a connection's AMQP header, open and begin over
// an in-memory pipe, then stops reading (no FIN, no RST: a broker that
// stalls). It returns the client's session; the pipe is closed at the
// test's end.
func stallingBroker(t *testing.T) *session {
	t.Helper()
	client, broker := net.Pipe()
	t.Cleanup(func() { _ = broker.Close() })
	frame := func(body ...byte) []byte {
		f := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
		return append(append(f, 2, 0, 0, 0), body...) // doff 2, AMQP, channel 0
	}
	const id = "fake"
	open := frame(append([]byte{0x00, 0x53, 0x10, 0xc0, byte(3 + len(id)), 1, 0xa1, byte(len(id))}, id...)...)
	begin := frame(0x00, 0x53, 0x11, 0xc0, 15, 4,
		0x60, 0, 0, // remote-channel 0
		0x43,                // next-outgoing-id 0
		0x70, 0, 0, 0x08, 0, // incoming-window
		0x70, 0, 0, 0x08, 0) // outgoing-window
	go func() {
		header := make([]byte, 8)
		if _, err := io.ReadFull(broker, header); err != nil {
			return
		}
		if _, err := broker.Write(header); err != nil {
			return
		}
		for _, answer := range [][]byte{open, begin} {
			size := make([]byte, 4)
			if _, err := io.ReadFull(broker, size); err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, broker, int64(binary.BigEndian.Uint32(size))-4); err != nil {
				return
			}
			if _, err := broker.Write(answer); err != nil {
				return
			}
		}
		// Stalled: nothing more is read, so the client's close frame
		// waits out go-amqp's write timeout (30 s).
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := amqp.NewConn(ctx, client, nil)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		_ = client.Close()
		t.Fatal(err)
	}
	return &session{conn: conn, sess: sess, shown: "amqp://stalled"}
}

// A broker that stalls does not keep session.Close (go-amqp's Conn.Close,
// which takes no context) past closeTimeout: the command exits.
func TestSessionCloseIsBounded(t *testing.T) {
	defer func(d time.Duration) { closeTimeout = d }(closeTimeout)
	closeTimeout = 100 * time.Millisecond
	s := stallingBroker(t)
	ended := false
	s.cancel = func() { ended = true }
	start := time.Now()
	s.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("session.Close took %s on a stalled broker, want about closeTimeout (%s)", took, closeTimeout)
	}
	if !ended {
		t.Error("session.Close did not end open's timeout")
	}
}
