package schema

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// Cipher encrypts and decrypts one protected field value: the seam for a
// KMS, Vault's transit engine or an HSM, as in the family's other SDKs.
// Encrypt is given the value's JSON text and returns a string that can
// travel inside JSON; Decrypt returns exactly the bytes Encrypt was given,
// and an error for a string it did not write (another key, tampered)
// rather than wrong bytes. Both are called from many goroutines at once.
// An error must not carry a key, or any part of the plaintext: it may end
// up in a dead-letter record.
type Cipher interface {
	Encrypt(plaintext []byte) (string, error)
	Decrypt(ciphertext string) ([]byte, error)
}

// ErrMalformedCiphertext is the error of AESGCMCipher.Decrypt for a string
// that is not standard base64 of at least a nonce and a tag.
var ErrMalformedCiphertext = errors.New("schema: not an AES-GCM ciphertext (standard base64 of a 12-byte nonce, the ciphertext and its tag)")

// ErrWrongKey is the error of AESGCMCipher.Decrypt when no key opens the
// value (another key wrote it, or it was changed).
var ErrWrongKey = errors.New("schema: no key of the cipher opens the value (another key, or tampered)")

// AESGCMCipher is the family's field cipher on the standard library:
// AES-GCM with a fresh random 12-byte nonce per value, the nonce before
// the ciphertext and its 16-byte tag, all in standard (padded) base64,
// the Go core's gdpr.AESGCMCipher and the Python SDK's wire format. The
// key's length picks AES-128, -192 or -256.
//
// The format carries no key id, so a key is rotated without a wire change:
// the cipher encrypts with its first key and decrypts with each of its keys
// in turn (GCM's tag tells which one wrote a value); keep the old key among
// them until no message written with it is left on a queue or a DLQ.
type AESGCMCipher struct {
	aeads []cipher.AEAD
}

// NewAESGCMCipher returns a cipher that encrypts with key and decrypts
// with key, then each of older. Each key is 16, 24 or 32 bytes.
func NewAESGCMCipher(key []byte, older ...[]byte) (*AESGCMCipher, error) {
	c := &AESGCMCipher{}
	for i, k := range append([][]byte{key}, older...) {
		switch len(k) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("schema: AES key %d is %d bytes: an AES key is 16, 24 or 32 bytes", i+1, len(k))
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("schema: AES key %d: %w", i+1, err)
		}
		aead, err := cipher.NewGCM(block) // the standard 12-byte nonce and 16-byte tag
		if err != nil {
			return nil, fmt.Errorf("schema: AES key %d: %w", i+1, err)
		}
		c.aeads = append(c.aeads, aead)
	}
	return c, nil
}

// Encrypt seals plaintext with the first key under a fresh random nonce.
func (c *AESGCMCipher) Encrypt(plaintext []byte) (string, error) {
	aead := c.aeads[0]
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return "", fmt.Errorf("schema: a nonce: %w", err)
	}
	out = aead.Seal(out, out, plaintext, nil)
	return base64.StdEncoding.EncodeToString(out), nil
}

// Decrypt opens a value Encrypt wrote, with any of the cipher's keys.
func (c *AESGCMCipher) Decrypt(ciphertext string) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(ciphertext)
	if err != nil || len(raw) < c.aeads[0].NonceSize()+c.aeads[0].Overhead() {
		return nil, ErrMalformedCiphertext
	}
	n := c.aeads[0].NonceSize()
	for _, aead := range c.aeads {
		if plain, err := aead.Open(nil, raw[:n], raw[n:], nil); err == nil {
			return plain, nil
		}
	}
	return nil, ErrWrongKey
}
