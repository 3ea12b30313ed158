// The library's one unsafe call: a byte slice seen as a string without a
// copy, on the publish path and in Bind, where it was measured to pay
// (BENCHMARKS.md, "unsafe").

package artemis

import "unsafe"

// stringView returns b's bytes as a string without copying them. The
// caller guarantees the bytes are not written while the string is in use:
// b is never written again (a fresh message's body, and a scan that keeps
// nothing of the string: Bind copies each string it stores), or only once the link is done with the message
// (a pooled message's body, see pooledMessage).
func stringView(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
