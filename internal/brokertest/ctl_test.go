package brokertest

import "testing"

func TestCtlRootOnlyForScriptInstances(t *testing.T) {
	for _, tc := range []struct{ dir, node, want string }{
		{"/repo/.artemis/instances/ha-primary", "ha-primary", "/repo"},
		{"/repo/.artemis/instances/c-2", "c-2", "/repo"},
		{"/repo/.artemis/instances/ha-primary", "other-primary", ""},
		{"/repo/brokers/instances/ha-primary", "ha-primary", ""},
		{"/repo/.artemis/ha-primary", "ha-primary", ""},
		{"", "ha-primary", ""},
	} {
		if got := ctlRoot(tc.dir, tc.node); got != tc.want {
			t.Errorf("ctlRoot(%q, %q) = %q, want %q", tc.dir, tc.node, got, tc.want)
		}
	}
}
