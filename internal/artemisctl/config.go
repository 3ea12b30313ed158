package artemisctl

import (
	"fmt"
	"regexp"
	"strings"
)

// The broker.xml edits. Each function takes the file's text and returns the
// new text; applied to what `artemis create` wrote, and again on every
// start, they give the same file (they are idempotent): a block the
// functions manage is replaced, never added twice.

// replaceFirst replaces the first match of re in s by repl, taken literally.
// ok is false when re does not match.
func replaceFirst(re *regexp.Regexp, s, repl string) (string, bool) {
	loc := re.FindStringIndex(s)
	if loc == nil {
		return s, false
	}
	return s[:loc[0]] + repl + s[loc[1]:], true
}

// replaceFirstFunc replaces the first match of re in s by f(submatches).
func replaceFirstFunc(re *regexp.Regexp, s string, f func(m []string) string) (string, bool) {
	loc := re.FindStringSubmatchIndex(s)
	if loc == nil {
		return s, false
	}
	var m []string
	for i := 0; i < len(loc); i += 2 {
		if loc[i] < 0 {
			m = append(m, "")
			continue
		}
		m = append(m, s[loc[i]:loc[i+1]])
	}
	return s[:loc[0]] + f(m) + s[loc[1]:], true
}

var (
	reAcceptors        = regexp.MustCompile(`(?s)<acceptors>.*?</acceptors>`)
	reAddressSettings  = regexp.MustCompile(`(?s)<address-settings>.*?</address-settings>`)
	reSecuritySettings = regexp.MustCompile(`(?s)<security-settings>.*?</security-settings>`)
	reCoreElement      = regexp.MustCompile(`(<core [^>]*>)`)
	reBeforeSecurity   = regexp.MustCompile(`(\n[ \t]*)(<security-settings>)`)
	reHAComment        = regexp.MustCompile(`\s*<!-- managed by scripts/artemis: (primary|backup) of a replication pair[^>]*-->`)
	reClusterComment   = regexp.MustCompile(`\s*<!-- managed by scripts/artemis: a node of a cluster[^>]*-->`)
	reCoreProtocols    = regexp.MustCompile(`(<acceptor name="artemis">[^<]*protocols=)CORE;`)
	reRouterAcceptor   = regexp.MustCompile(`\s*<acceptor name="router">[^<]*</acceptor>`)
	reDefaultSetting   = regexp.MustCompile(`(<address-setting match="#">)`)
)

const acceptorsBlock = `<acceptors>
         <!-- managed by scripts/artemis: CORE for the artemis CLI, AMQP for clients; loopback only -->
         <acceptor name="artemis">tcp://127.0.0.1:%d?tcpSendBufferSize=1048576;tcpReceiveBufferSize=1048576;protocols=CORE;useEpoll=true</acceptor>
         <acceptor name="amqp">tcp://127.0.0.1:%d?tcpSendBufferSize=1048576;tcpReceiveBufferSize=1048576;protocols=AMQP;useEpoll=true;amqpCredits=1000;amqpLowCredits=300;amqpMinLargeMessageSize=102400;amqpDuplicateDetection=true</acceptor>
      </acceptors>`

// addressSettingsBlock: ANYCAST auto-creation everywhere, dead letters to
// DLQ after 10 attempts without delay, and the bqtest.tinydlq.# addresses
// that refuse every send once they hold a message.
const addressSettingsBlock = `<address-settings>
         <!-- managed by scripts/artemis -->
         <address-setting match="activemq.management#">
            <dead-letter-address>DLQ</dead-letter-address>
            <expiry-address>ExpiryQueue</expiry-address>
            <redelivery-delay>0</redelivery-delay>
            <max-size-bytes>-1</max-size-bytes>
            <message-counter-history-day-limit>10</message-counter-history-day-limit>
            <address-full-policy>PAGE</address-full-policy>
            <auto-create-queues>true</auto-create-queues>
            <auto-create-addresses>true</auto-create-addresses>
         </address-setting>
         <!-- default for all addresses -->
         <address-setting match="#">
            <dead-letter-address>DLQ</dead-letter-address>
            <auto-create-dead-letter-resources>false</auto-create-dead-letter-resources>
            <expiry-address>ExpiryQueue</expiry-address>
            <auto-create-expiry-resources>false</auto-create-expiry-resources>
            <redelivery-delay>0</redelivery-delay>
            <max-delivery-attempts>10</max-delivery-attempts>
            <message-counter-history-day-limit>10</message-counter-history-day-limit>
            <address-full-policy>PAGE</address-full-policy>
            <auto-create-queues>true</auto-create-queues>
            <auto-create-addresses>true</auto-create-addresses>
            <auto-delete-queues>false</auto-delete-queues>
            <auto-delete-addresses>false</auto-delete-addresses>
            <default-address-routing-type>ANYCAST</default-address-routing-type>
            <default-queue-routing-type>ANYCAST</default-queue-routing-type>
            <page-size-bytes>1M</page-size-bytes>
            <max-size-bytes>-1</max-size-bytes>
            <max-size-messages>-1</max-size-messages>
            <max-read-page-messages>-1</max-read-page-messages>
            <max-read-page-bytes>20M</max-read-page-bytes>
            <page-limit-bytes>-1</page-limit-bytes>
            <page-limit-messages>-1</page-limit-messages>
         </address-setting>
         <!-- integration tests: an address that refuses writes once it holds a message -->
         <address-setting match="bqtest.tinydlq.#">
            <max-size-bytes>1</max-size-bytes>
            <address-full-policy>FAIL</address-full-policy>
         </address-setting>
      </address-settings>`

// permissions lists the permission lines of a security-setting. Role amq
// (the instance's user) may do everything; role nodlq everything but
// deleting durable queues and addresses, managing, and sending where
// sendRoles leaves it out.
func permissions(sendRoles string) string {
	perms := [][2]string{
		{"createNonDurableQueue", "amq,nodlq"}, {"deleteNonDurableQueue", "amq,nodlq"},
		{"createDurableQueue", "amq,nodlq"}, {"deleteDurableQueue", "amq"},
		{"createAddress", "amq,nodlq"}, {"deleteAddress", "amq"},
		{"consume", "amq,nodlq"}, {"browse", "amq,nodlq"}, {"send", sendRoles}, {"manage", "amq"},
	}
	lines := make([]string, len(perms))
	for i, p := range perms {
		lines[i] = fmt.Sprintf(`            <permission type="%s" roles="%s"/>`, p[0], p[1])
	}
	return strings.Join(lines, "\n")
}

// securitySettingsBlock: "#" for both roles; "*.dlq" ... "*.*.*.*.*.*.dlq"
// (dead-letter queues of names of up to 6 words) without send for nodlq.
// The most specific match wins and permissions are not merged, so those
// entries repeat everything amq keeps there; Artemis takes "#" only at the
// end of a match ("#.dlq" stops the broker: AMQ229071).
func securitySettingsBlock() string {
	var dlq []string
	for n := 1; n <= 6; n++ {
		dlq = append(dlq, fmt.Sprintf("         <security-setting match=\"%sdlq\">\n%s\n         </security-setting>",
			strings.Repeat("*.", n), permissions("amq")))
	}
	return "<security-settings>\n" +
		"         <!-- managed by scripts/artemis: amq may do everything; nodlq may not send to <queue>.dlq -->\n" +
		"         <security-setting match=\"#\">\n" +
		permissions("amq,nodlq") + "\n" +
		"         </security-setting>\n" +
		strings.Join(dlq, "\n") + "\n" +
		"      </security-settings>"
}

// coreSetting is one plain element of <core> the set-up fixes.
type coreSetting struct{ tag, value string }

func coreSettings(fsync bool) []coreSetting {
	datasync, bufferTimeout := "false", "100000"
	if fsync {
		// Without fsync a flush is a plain write: flush often so a lone
		// durable send is settled fast.
		datasync, bufferTimeout = "true", "1000000"
	}
	return []coreSetting{
		{"persistence-enabled", "true"},
		{"journal-type", "NIO"},
		{"journal-datasync", datasync},
		{"journal-buffer-timeout", bufferTimeout},
		{"journal-file-size", "2M"},
		{"journal-min-files", "2"},
		{"journal-pool-files", "4"},
		{"max-disk-usage", "100"},
		{"critical-analyzer-policy", "LOG"},
	}
}

// ConfigureBase applies the settings every instance has: the two loopback
// acceptors (CORE for the CLI, AMQP for clients), the address and security
// settings, and the journal and disk settings of <core>.
func ConfigureBase(xml string, amqp, core int, fsync bool) (string, error) {
	var ok bool
	if xml, ok = replaceFirst(reAcceptors, xml, fmt.Sprintf(acceptorsBlock, core, amqp)); !ok {
		return "", fmt.Errorf("broker.xml: could not find <acceptors>")
	}
	if xml, ok = replaceFirst(reAddressSettings, xml, addressSettingsBlock); !ok {
		return "", fmt.Errorf("broker.xml: could not find <address-settings>")
	}
	if xml, ok = replaceFirst(reSecuritySettings, xml, securitySettingsBlock()); !ok {
		return "", fmt.Errorf("broker.xml: could not find <security-settings>")
	}
	for _, s := range coreSettings(fsync) {
		elem := "<" + s.tag + ">" + s.value + "</" + s.tag + ">"
		re := regexp.MustCompile("<" + regexp.QuoteMeta(s.tag) + ">[^<]*</" + regexp.QuoteMeta(s.tag) + ">")
		if re.MatchString(xml) {
			xml, _ = replaceFirst(re, xml, elem)
			continue
		}
		if xml, ok = replaceFirstFunc(reCoreElement, xml, func(m []string) string { return m[1] + "\n      " + elem }); !ok {
			return "", fmt.Errorf("broker.xml: could not find <core>")
		}
	}
	return xml, nil
}

// dropElements removes every <tag>...</tag> of the given tags, with the
// white space before each.
func dropElements(xml string, tags ...string) string {
	for _, tag := range tags {
		re := regexp.MustCompile(`(?s)\s*<` + regexp.QuoteMeta(tag) + `>.*?</` + regexp.QuoteMeta(tag) + `>`)
		xml = re.ReplaceAllLiteralString(xml, "")
	}
	return xml
}

// insertBeforeSecurity puts block before <security-settings>, on that
// element's line and indentation.
func insertBeforeSecurity(xml, block string) (string, error) {
	out, ok := replaceFirstFunc(reBeforeSecurity, xml, func(m []string) string { return m[1] + block + m[2] })
	if !ok {
		return "", fmt.Errorf("broker.xml: could not find <security-settings>")
	}
	return out, nil
}

// xmlEscape escapes &, < and > (as the text of an element needs).
func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// xmlAttrEscape escapes s for a double-quoted attribute value.
func xmlAttrEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// ConfigureHA applies the settings of a replication pair's node (role
// "primary" or "backup") on top of ConfigureBase: connectors "artemis"
// (this node's CORE acceptor) and "peer", the cluster user (the
// instance's), the cluster-connection "bq-ha" over the static connector
// (no UDP), max-hops 0, load balancing OFF, and ha-policy replication
// with a pluggable lock manager: Artemis's file lock in the folder locks,
// which both nodes share. A node becomes active only while it holds the
// pair's lock and only with the newest journal (the activation sequence
// kept beside the lock), so neither a restarted primary that cannot reach
// its backup in time nor a slow replication can make two active nodes or
// one active on a stale journal. The backup allows fail-back: once it has
// synchronised a restarted primary, it hands back and becomes the backup
// again.
func ConfigureHA(xml string, core int, role string, peer int, user, password, locks string) (string, error) {
	xml = dropElements(xml, "connectors", "cluster-user", "cluster-password", "cluster-connections", "ha-policy",
		"broadcast-groups", "discovery-groups")
	manager := fmt.Sprintf(`<manager>
                  <class-name>org.apache.activemq.artemis.lockmanager.file.FileBasedLockManager</class-name>
                  <properties>
                     <property key="locks-folder" value="%s"/>
                  </properties>
               </manager>`, xmlAttrEscape(locks))
	policy := `<backup>
               ` + manager + `
               <allow-failback>true</allow-failback>
            </backup>`
	if role == "primary" {
		policy = `<primary>
               ` + manager + `
            </primary>`
	}
	block := fmt.Sprintf(`<!-- managed by scripts/artemis: %s of a replication pair over loopback (static connectors, no UDP) -->
      <connectors>
         <connector name="artemis">tcp://127.0.0.1:%d</connector>
         <connector name="peer">tcp://127.0.0.1:%d</connector>
      </connectors>
      <cluster-user>%s</cluster-user>
      <cluster-password>%s</cluster-password>
      <cluster-connections>
         <cluster-connection name="bq-ha">
            <connector-ref>artemis</connector-ref>
            <message-load-balancing>OFF</message-load-balancing>
            <max-hops>0</max-hops>
            <static-connectors>
               <connector-ref>peer</connector-ref>
            </static-connectors>
         </cluster-connection>
      </cluster-connections>
      <ha-policy>
         <replication>
            %s
         </replication>
      </ha-policy>
      `, role, core, peer, xmlEscape(user), xmlEscape(password), policy)
	xml = reHAComment.ReplaceAllLiteralString(xml, "")
	return insertBeforeSecurity(xml, block)
}

// ConfigureCluster applies the settings of a cluster node on top of
// ConfigureBase: the CORE acceptor speaks AMQP too (the address a
// connection router redirects to), connectors "artemis" and "peerK" (the
// other nodes' CORE acceptors), the cluster user, the cluster-connection
// "bq-cluster" over static connectors (no UDP), max-hops 1,
// OFF_WITH_REDISTRIBUTION, redistribution-delay 0 on "#"; and, when
// routerPort is not 0, the AMQP acceptor "router" whose connection router
// "bq-router" redirects every connection to another node.
func ConfigureCluster(xml string, core int, peers []int, routerPort int, user, password string) (string, error) {
	xml = dropElements(xml, "connectors", "cluster-user", "cluster-password", "cluster-connections", "ha-policy",
		"broadcast-groups", "discovery-groups", "connection-routers")
	xml, _ = replaceFirstFunc(reCoreProtocols, xml, func(m []string) string { return m[1] + "CORE,AMQP;" })
	if routerPort != 0 {
		acc := fmt.Sprintf(`<acceptor name="router">tcp://127.0.0.1:%d?protocols=AMQP;useEpoll=true;router=bq-router</acceptor>`+
			"\n      </acceptors>", routerPort)
		xml = reRouterAcceptor.ReplaceAllLiteralString(xml, "")
		xml = strings.Replace(xml, "</acceptors>", "   "+acc, 1)
	}
	xml, _ = replaceFirstFunc(reDefaultSetting, xml, func(m []string) string {
		return m[1] + "\n            <redistribution-delay>0</redistribution-delay>"
	})
	var connectors, refs []string
	for i, p := range peers {
		connectors = append(connectors, fmt.Sprintf(`         <connector name="peer%d">tcp://127.0.0.1:%d</connector>`, i+1, p))
		refs = append(refs, fmt.Sprintf(`               <connector-ref>peer%d</connector-ref>`, i+1))
	}
	routers := ""
	if routerPort != 0 {
		routers = fmt.Sprintf(`
      <connection-routers>
         <connection-router name="bq-router">
            <key-type>USER_NAME</key-type>
            <policy name="CONSISTENT_HASH"/>
            <pool>
               <username>%s</username>
               <password>%s</password>
               <check-period>1000</check-period>
               <local-target-enabled>false</local-target-enabled>
               <static-connectors>
%s
               </static-connectors>
            </pool>
         </connection-router>
      </connection-routers>`, xmlEscape(user), xmlEscape(password), strings.Join(refs, "\n"))
	}
	block := fmt.Sprintf(`<!-- managed by scripts/artemis: a node of a cluster over loopback (static connectors, no UDP) -->
      <connectors>
         <connector name="artemis">tcp://127.0.0.1:%d</connector>
%s
      </connectors>
      <cluster-user>%s</cluster-user>
      <cluster-password>%s</cluster-password>
      <cluster-connections>
         <cluster-connection name="bq-cluster">
            <connector-ref>artemis</connector-ref>
            <retry-interval>500</retry-interval>
            <message-load-balancing>OFF_WITH_REDISTRIBUTION</message-load-balancing>
            <max-hops>1</max-hops>
            <static-connectors>
%s
            </static-connectors>
         </cluster-connection>
      </cluster-connections>%s
      `, core, strings.Join(connectors, "\n"), xmlEscape(user), xmlEscape(password), strings.Join(refs, "\n"), routers)
	xml = reClusterComment.ReplaceAllLiteralString(xml, "")
	return insertBeforeSecurity(xml, block)
}

var reNodlqLine = regexp.MustCompile(`(?m)^[ \t]*nodlq[ \t]*[=:]`)

// AddNodlq appends line to a properties file's text unless it has a nodlq
// entry already. changed is false when it has.
func AddNodlq(text, line string) (out string, changed bool) {
	if reNodlqLine.MatchString(text) {
		return text, false
	}
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text + line + "\n", true
}

var (
	reXms      = regexp.MustCompile(`-Xms[^ "]*`)
	reXmx      = regexp.MustCompile(`-Xmx[^ "]*`)
	reHeapSize = regexp.MustCompile(`^[0-9]+[kKmMgG]?$`)
)

// SetHeap sets -Xms and -Xmx in etc/artemis.profile's text (the first of
// each on every line).
func SetHeap(profile, xms, xmx string) string {
	lines := strings.Split(profile, "\n")
	for i, l := range lines {
		l, _ = replaceFirst(reXms, l, "-Xms"+xms)
		l, _ = replaceFirst(reXmx, l, "-Xmx"+xmx)
		lines[i] = l
	}
	return strings.Join(lines, "\n")
}
