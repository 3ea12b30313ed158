package schema

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestAESGCMCipherFormat(t *testing.T) {
	c, err := NewAESGCMCipher(testKey(1))
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte(`"alice@example.com"`)
	a, err := c.Encrypt(plain)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.Encrypt(plain)
	if a == b {
		t.Error("two encryptions of one value are equal: the nonce is not fresh")
	}
	raw, err := base64.StdEncoding.DecodeString(a)
	if err != nil {
		t.Fatalf("not standard base64: %v", err)
	}
	if len(raw) != 12+len(plain)+16 {
		t.Errorf("%d bytes, want a 12-byte nonce, %d of ciphertext and a 16-byte tag", len(raw), len(plain))
	}
	got, err := c.Decrypt(a)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Decrypt: %q %v", got, err)
	}
	for _, n := range []int{16, 24} {
		if _, err := NewAESGCMCipher(bytes.Repeat([]byte{2}, n)); err != nil {
			t.Errorf("a %d-byte key: %v", n, err)
		}
	}
}

// TestAESGCMCipherRotation: the first key encrypts, every key decrypts; a
// value no key opens, or one that is not a ciphertext, is an error that
// shows no key.
func TestAESGCMCipherRotation(t *testing.T) {
	old, _ := NewAESGCMCipher(testKey(1))
	rotated, err := NewAESGCMCipher(testKey(2), testKey(1))
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := NewAESGCMCipher(testKey(2))
	v, _ := old.Encrypt([]byte(`1`))
	if got, err := rotated.Decrypt(v); err != nil || string(got) != "1" {
		t.Errorf("an old key's value: %q %v", got, err)
	}
	w, _ := rotated.Encrypt([]byte(`2`))
	if got, err := fresh.Decrypt(w); err != nil || string(got) != "2" {
		t.Errorf("the new key encrypts: %q %v", got, err)
	}
	if _, err := fresh.Decrypt(v); !errors.Is(err, ErrWrongKey) {
		t.Errorf("a key that is gone: %v, want ErrWrongKey", err)
	}
	tampered := []byte(v)
	tampered[20] ^= 1
	for _, bad := range []string{string(tampered), "!!!", base64.StdEncoding.EncodeToString(make([]byte, 27))} {
		_, err := old.Decrypt(bad)
		if err == nil {
			t.Errorf("Decrypt(%q) took it", bad)
			continue
		}
		if !errors.Is(err, ErrWrongKey) && !errors.Is(err, ErrMalformedCiphertext) {
			t.Errorf("Decrypt(%q): %v", bad, err)
		}
		if strings.Contains(err.Error(), "\x01\x01") {
			t.Errorf("the error shows the key: %v", err)
		}
	}
	if _, err := NewAESGCMCipher(testKey(1), []byte("0123456789")); err == nil ||
		err.Error() != "schema: AES key 2 is 10 bytes: an AES key is 16, 24 or 32 bytes" || strings.Contains(err.Error(), "0123") {
		t.Errorf("a short key: %v", err)
	}
}
