package leaktest

import (
	"strings"
	"testing"
)

// TestNoPieceFitsInAnAddress: no piece of any case's secrets is made only
// of characters an address is written with, so no port, the dialling
// side's ephemeral one included, can show one.
func TestNoPieceFitsInAnAddress(t *testing.T) {
	for _, c := range Cases() {
		for _, p := range c.Pieces() {
			if strings.Trim(p, AddressChars) == "" {
				t.Errorf("%s: the piece %q of its password can be part of an address (a port such as 4%s)", c.URL, p, p)
			}
		}
	}
}
