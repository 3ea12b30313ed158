package artemisctl

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Usage is the text of `scripts/artemis help`.
const Usage = `scripts/artemis: a local Apache ActiveMQ Artemis ` + Version + ` broker for development and tests.

Usage: scripts/artemis start|stop|status|env|kill|restart|restart-after-kill|reset|log
                       | cli ARTEMIS-CLI-ARGS... | produce-text QUEUE JMSTYPE BODY_FILE|- [CORRELATION_ID] [K=V...]
                       | ha-start|ha-env|ha-status|ha-stop|ha-reset | ha-kill [primary|backup] [--no-wait]
                       | ha-restart [primary|backup] | ha-log [primary|backup]
                       | cluster-start [N] | cluster-env|cluster-status|cluster-stop|cluster-reset
                       | cluster-kill I | cluster-restart I | cluster-log I

  eval "$(scripts/artemis start)"   # prints "export KEY=value" lines (stdout) that eval exports;
                                    # progress and the URL (password hidden) go to stderr
  scripts/artemis status            # exit 0 if running, 3 if not
  scripts/artemis stop              # graceful (SIGTERM), SIGKILL after ARTEMIS_STOP_TIMEOUT s
  scripts/artemis kill              # SIGKILL (fault tests); a later ` + "`start`" + ` recovers the journal
  scripts/artemis reset             # stop and delete the instance
  scripts/artemis cli queue stat    # run the instance's CLI with --url/--user/--password added

`

// Main runs one scripts/artemis command (args[0]) for the repository
// root with the environment env, and returns its exit code. The cli
// command replaces the process with the Artemis CLI when exec is true.
func Main(root string, args, env []string, stdin io.Reader, stdout, stderr io.Writer, execCLI bool) int {
	c := New(root, env, stdout, stderr)
	return ExitCode(c.run(args, stdin, execCLI))
}

func (c *Ctl) usage() error {
	c.rawStderr(Usage)
	return &ExitError{Code: 2, Msg: "usage"}
}

func (c *Ctl) run(args []string, stdin io.Reader, execCLI bool) error {
	cmd := ""
	if len(args) > 0 {
		cmd = args[0]
	}
	arg := func(k int) string {
		if k < len(args) {
			return args[k]
		}
		return ""
	}
	name := c.getenv("ARTEMIS_INSTANCE")
	if name == "" {
		name = "default"
	}
	inst, err := c.Instance(name)
	if err != nil {
		return err
	}
	switch cmd {
	case "start":
		return c.Start(inst, false)
	case "restart-after-kill":
		return c.Start(inst, true)
	case "stop":
		return inst.Stop()
	case "restart":
		if err := inst.Stop(); err != nil {
			return err
		}
		return c.Start(inst, true)
	case "status":
		line, ok := inst.Status()
		c.printf("%s\n", line)
		if !ok {
			return &ExitError{Code: 3}
		}
		return nil
	case "env":
		if inst.running() {
			c.printf("%s", inst.Env())
			return nil
		}
		inst.logf("not running (use: scripts/artemis start)")
		return &ExitError{Code: 3}
	case "kill":
		_, err := inst.Kill()
		return err
	case "reset":
		return inst.Reset()
	case "log":
		c.printf("%s\n", inst.LogPath())
		return nil
	case "cli":
		return c.cli(inst, args[1:], stdin, execCLI)
	case "produce-text":
		return c.produceText(inst, args[1:], stdin)
	case "ha-start", "ha-env", "ha-status", "ha-kill", "ha-restart", "ha-stop", "ha-reset", "ha-log":
		return c.ha(strings.TrimPrefix(cmd, "ha-"), arg(1), arg(2))
	case "cluster-start", "cluster-env", "cluster-status", "cluster-kill", "cluster-restart", "cluster-stop", "cluster-reset", "cluster-log":
		return c.cluster(strings.TrimPrefix(cmd, "cluster-"), arg(1))
	case "-h", "--help", "help":
		c.rawStderr(Usage)
		return nil
	default:
		return c.usage()
	}
}

// Start starts the instance and prints its export lines. Unless local, an
// ARTEMIS_URL of another broker (with ARTEMIS_INSTANCE not set) means
// "bring your own broker": then only that URL is printed.
func (c *Ctl) Start(inst *Instance, local bool) error {
	if !local && !c.isSet("ARTEMIS_INSTANCE") && c.isSet("ARTEMIS_URL") && c.getenv("ARTEMIS_URL") != inst.URL() {
		u := c.getenv("ARTEMIS_URL")
		inst.logf("ARTEMIS_URL is set: using that broker (%s), not starting a local one", redactURL(u))
		c.printf("export ARTEMIS_URL=%s\n", shellQuote(u))
		return nil
	}
	if err := inst.StartNode(); err != nil {
		return err
	}
	c.printf("%s", inst.Env())
	return nil
}

// cli runs the instance's CLI with --url/--user/--password added.
func (c *Ctl) cli(inst *Instance, args []string, stdin io.Reader, execCLI bool) error {
	bin := filepath.Join(inst.Dir, "bin", "artemis")
	if !isExecutable(bin) {
		return inst.die("no instance at %s (use: scripts/artemis start)", inst.Dir)
	}
	full := inst.cliArgs(args)
	if execCLI {
		err := syscall.Exec(bin, append([]string{bin}, full...), c.env)
		return inst.die("exec %s: %v", bin, err)
	}
	cmd := exec.Command(bin, full...)
	cmd.Env = c.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, c.stdout, c.stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return &ExitError{Code: ee.ExitCode(), Msg: err.Error()}
		}
		return inst.die("%v", err)
	}
	return nil
}

// ProduceXML is the message file of `artemis producer --data` for one
// persistent TextMessage: JMSType, JMSCorrelationID (when not empty) and
// the string properties props ("KEY=VALUE"). The CDATA is on its own line:
// the CLI's reader makes a broken message of an inline one or an empty
// body.
func ProduceXML(jmsType, body, corr string, props []string) (string, error) {
	cdata := "<![CDATA[" + strings.ReplaceAll(body, "]]>", "]]]]><![CDATA[>") + "]]>"
	lines := []string{`<?xml version="1.0"?>`, "<messages>", `   <message type="text" priority="4">`, "      <properties>"}
	prop := func(k, v string) {
		lines = append(lines, fmt.Sprintf(`         <property name=%s value=%s type="simple-string"/>`, quoteAttr(k), quoteAttr(v)))
	}
	if jmsType != "" {
		prop("JMSType", jmsType)
	}
	if corr != "" {
		prop("JMSCorrelationID", corr)
	}
	for _, kv := range props {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", fmt.Errorf("property must be KEY=VALUE: %s", kv)
		}
		prop(k, v)
	}
	if body == "" {
		return "", fmt.Errorf("the CLI cannot send an empty text body")
	}
	lines = append(lines, "      </properties>", "      <body>", "         "+cdata, "      </body>", "   </message>", "</messages>")
	return strings.Join(lines, "\n") + "\n", nil
}

// quoteAttr quotes an attribute value as Python's quoteattr does: double
// quotes unless the value holds one and no single quote.
func quoteAttr(v string) string {
	v = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\n", "&#10;", "\r", "&#13;", "\t", "&#9;").Replace(v)
	if strings.Contains(v, `"`) {
		if strings.Contains(v, "'") {
			return `"` + strings.ReplaceAll(v, `"`, "&quot;") + `"`
		}
		return "'" + v + "'"
	}
	return `"` + v + `"`
}

// produceText sends one persistent JMS TextMessage through the CLI:
// produce-text QUEUE JMSTYPE BODY_FILE|- [CORRELATION_ID|""] [KEY=VALUE ...].
func (c *Ctl) produceText(inst *Instance, args []string, stdin io.Reader) error {
	if len(args) < 3 {
		return inst.die("usage: scripts/artemis produce-text QUEUE JMSTYPE BODY_FILE|- [CORRELATION_ID] [KEY=VALUE ...]")
	}
	bin := filepath.Join(inst.Dir, "bin", "artemis")
	if !isExecutable(bin) {
		return inst.die("no instance at %s (use: scripts/artemis start)", inst.Dir)
	}
	queue, jmsType, bodyFile := args[0], args[1], args[2]
	corr, props := "", []string(nil)
	if len(args) > 3 {
		corr, props = args[3], args[4:]
	}
	var body []byte
	var err error
	if bodyFile == "-" {
		body, err = io.ReadAll(stdin)
	} else {
		body, err = os.ReadFile(bodyFile)
	}
	if err != nil {
		c.rawStderr(err.Error() + "\n")
		return inst.die("could not write the message XML")
	}
	xml, err := ProduceXML(jmsType, string(body), corr, props)
	if err != nil {
		c.rawStderr(err.Error() + "\n")
		return inst.die("could not write the message XML")
	}
	f, err := os.CreateTemp("", "artemis-produce.")
	if err != nil {
		return inst.die("%v", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.WriteString(xml); err != nil {
		_ = f.Close()
		return inst.die("could not write the message XML")
	}
	_ = f.Close()
	cmd := exec.Command(bin, "producer", "--url", inst.CoreURL(), "--user", inst.Get("USER"), "--password", inst.Get("PASSWORD"),
		"--destination", "queue://"+queue, "--data", f.Name())
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = c.stderr, c.stderr
	if err := cmd.Run(); err != nil {
		rc := 1
		if ee, ok := err.(*exec.ExitError); ok {
			rc = ee.ExitCode()
		}
		return inst.die("artemis producer failed (exit %d)", rc)
	}
	return nil
}

// printEnv prints the export lines env makes (a pair's or a cluster's).
func (c *Ctl) printEnv(env func() (string, error)) error {
	text, err := env()
	if err != nil {
		return err
	}
	c.printf("%s", text)
	return nil
}

// printStatus prints a status text; ok false (a node is not running) is
// exit status 3.
func (c *Ctl) printStatus(text string, ok bool) error {
	c.printf("%s", text)
	if !ok {
		return &ExitError{Code: 3}
	}
	return nil
}

func (c *Ctl) ha(sub, role, opt string) error {
	p := c.Pair(c.getenv("ARTEMIS_HA_NAME"))
	if role == "" {
		role = "primary"
	}
	printEnv := func() error { return c.printEnv(p.Env) }
	switch sub {
	case "start":
		if err := p.Start(); err != nil {
			return err
		}
		return printEnv()
	case "env":
		return printEnv()
	case "status":
		return c.printStatus(p.Status())
	case "kill":
		_, err := p.Kill(role, opt == "--no-wait")
		return err
	case "restart":
		if err := p.Restart(role); err != nil {
			return err
		}
		return printEnv()
	case "stop":
		return p.Stop()
	case "reset":
		return p.Reset()
	case "log":
		i, err := p.Node(role)
		if err != nil {
			return err
		}
		c.printf("%s\n", i.LogPath())
		return nil
	}
	return c.usage()
}

func (c *Ctl) cluster(sub, arg string) error {
	cl := c.Cluster(c.getenv("ARTEMIS_CLUSTER_NAME"))
	printEnv := func() error { return c.printEnv(cl.Env) }
	switch sub {
	case "start":
		// No argument: the created size (else 3); one that is not a
		// positive number: 3.
		n := 0
		if arg != "" {
			if v, err := strconv.Atoi(arg); err == nil && v > 0 {
				n = v
			} else {
				n = 3
			}
		}
		if err := cl.Start(n); err != nil {
			return err
		}
		return printEnv()
	case "env":
		return printEnv()
	case "status":
		return c.printStatus(cl.Status())
	case "kill":
		_, err := cl.Kill(arg)
		return err
	case "restart":
		if _, err := cl.Restart(arg); err != nil {
			return err
		}
		return printEnv()
	case "stop":
		return cl.Stop()
	case "reset":
		return cl.Reset()
	case "log":
		k, err := cl.checkIndex(arg)
		if err != nil {
			return err
		}
		node, _ := cl.Node(k)
		c.printf("%s\n", node.LogPath())
		return nil
	}
	return c.usage()
}
