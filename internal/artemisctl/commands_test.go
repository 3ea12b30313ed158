package artemisctl

import (
	"path/filepath"
	"strings"
	"testing"
)

// The expected text is what the shell script's Python wrote for the same
// arguments.
func TestProduceXML(t *testing.T) {
	got, err := ProduceXML("order.created", `{"orderId":7,"t":"a]]>b & <c>"}`, "corr-7",
		[]string{"bq_origin=cli", `q=it's "x"`, "amp=a&b<c>"})
	if err != nil {
		t.Fatal(err)
	}
	want := `<?xml version="1.0"?>
<messages>
   <message type="text" priority="4">
      <properties>
         <property name="JMSType" value="order.created" type="simple-string"/>
         <property name="JMSCorrelationID" value="corr-7" type="simple-string"/>
         <property name="bq_origin" value="cli" type="simple-string"/>
         <property name="q" value="it's &quot;x&quot;" type="simple-string"/>
         <property name="amp" value="a&amp;b&lt;c&gt;" type="simple-string"/>
      </properties>
      <body>
         <![CDATA[{"orderId":7,"t":"a]]]]><![CDATA[>b & <c>"}]]>
      </body>
   </message>
</messages>
`
	if got != want {
		t.Errorf("ProduceXML:\n%s\nwant:\n%s", got, want)
	}
	if _, err := ProduceXML("t", "", "", nil); err == nil {
		t.Error("an empty body was accepted")
	}
	if _, err := ProduceXML("t", "b", "", []string{"novalue"}); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
		t.Errorf("a property without = : err = %v", err)
	}
	if got, want := quoteAttr(`say "hi"`), `'say "hi"'`; got != want {
		t.Errorf("quoteAttr = %s, want %s", got, want)
	}
}

// Commands that need no broker: their output and exit codes.
func TestCommandsWithoutABroker(t *testing.T) {
	for _, tc := range []struct {
		env          []string
		args         []string
		code         int
		stdout, errs string
	}{
		{[]string{"ARTEMIS_INSTANCE=bgo-none"}, []string{"status"}, 3, "stopped: instance bgo-none not created\n", ""},
		{[]string{"ARTEMIS_INSTANCE=bgo-none"}, []string{"env"}, 3, "", "artemis[bgo-none]: not running (use: scripts/artemis start)\n"},
		{[]string{"ARTEMIS_INSTANCE=bgo-none"}, []string{"stop"}, 0, "", "artemis[bgo-none]: no instance at "},
		{[]string{"ARTEMIS_INSTANCE=bgo-none"}, []string{"kill"}, 0, "", "artemis[bgo-none]: no instance at "},
		{[]string{"ARTEMIS_INSTANCE=bad/name"}, []string{"status"}, 2, "", "scripts/artemis: bad instance name 'bad/name' (use letters, digits, . _ -)\n"},
		{nil, []string{"bogus"}, 2, "", "scripts/artemis: a local Apache ActiveMQ Artemis 2.40.0 broker for development and tests.\n\nUsage: scripts/artemis "},
		{nil, []string{}, 2, "", "scripts/artemis: a local"},
		{nil, []string{"help"}, 0, "", "scripts/artemis: a local"},
		{[]string{"ARTEMIS_HA_NAME=bgoha-none"}, []string{"ha-kill", "middle"}, 1, "", "artemis[ha:bgoha-none]: ERROR: the node is primary or backup, not 'middle'\n"},
		{[]string{"ARTEMIS_HA_NAME=bgoha-none"}, []string{"ha-env"}, 1, "", "artemis[ha:bgoha-none]: ERROR: the pair bgoha-none is not created (use: scripts/artemis ha-start)\n"},
		{[]string{"ARTEMIS_CLUSTER_NAME=bgocl-none"}, []string{"cluster-kill", "2"}, 1, "", "artemis[cluster:bgocl-none]: ERROR: the cluster bgocl-none is not created (use: scripts/artemis cluster-start)\n"},
		{[]string{"ARTEMIS_CLUSTER_NAME=bgocl-none"}, []string{"cluster-status"}, 3, "stopped: cluster bgocl-none not created\n", ""},
		{[]string{"ARTEMIS_URL=amqp://me:secret@broker.example:5672"}, []string{"start"}, 0, "export ARTEMIS_URL=amqp://me:secret@broker.example:5672\n",
			"artemis[default]: ARTEMIS_URL is set: using that broker (amqp://me:xxxxx@broker.example:5672), not starting a local one\n"},
	} {
		c, out, errb := testCtl(t, tc.env...)
		code := ExitCode(c.run(tc.args, nil, false))
		if code != tc.code || out.String() != tc.stdout || !strings.HasPrefix(errb.String(), tc.errs) || (tc.errs == "" && errb.Len() > 0) {
			t.Errorf("%v %v: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr starting %q",
				tc.env, tc.args, code, out, errb, tc.code, tc.stdout, tc.errs)
		}
	}
}

func TestLogPaths(t *testing.T) {
	c, out, _ := testCtl(t, "ARTEMIS_HA_NAME=bgoha", "ARTEMIS_INSTANCE=bgo1")
	if code := ExitCode(c.run([]string{"log"}, nil, false)); code != 0 {
		t.Fatal(code)
	}
	if code := ExitCode(c.run([]string{"ha-log", "backup"}, nil, false)); code != 0 {
		t.Fatal(code)
	}
	want := filepath.Join(c.Base, "instances", "bgo1", "log", "artemis.log") + "\n" +
		filepath.Join(c.Base, "instances", "bgoha-backup", "log", "artemis.log") + "\n"
	if out.String() != want {
		t.Errorf("log paths:\n%s\nwant:\n%s", out, want)
	}
}
