package artemis

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// goAMQPCheckedForReuse is the go-amqp version whose Sender was read and
// tested (TestPooledMessageIsNotKeptByGoAMQP) to copy a message out during
// Send and SendWithReceipt and keep no reference to it, which the pooled
// messages of Publisher rely on (see pooledMessage). Upgrading go-amqp
// fails TestGoAMQPVersionIsTheOneCheckedForReuse until the new version's
// sender.go is read again, the integration test passes against it, and this
// constant is moved.
const goAMQPCheckedForReuse = "v1.7.0"

// The module's go.mod is what the library builds against (a test binary has
// no dependency list in its build information).
func TestGoAMQPVersionIsTheOneCheckedForReuse(t *testing.T) {
	b, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	var versions []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require"))
		if len(f) >= 2 && f[0] == "github.com/Azure/go-amqp" {
			versions = append(versions, f[1])
		}
		require.False(t, strings.HasPrefix(strings.TrimSpace(line), "replace") && strings.Contains(line, "go-amqp"),
			"go-amqp is replaced: check the replacement for message reuse (see pooledMessage)")
	}
	require.Equal(t, []string{goAMQPCheckedForReuse}, versions,
		"go-amqp changed: check that (*amqp.Sender).send still marshals the message and copies the payload before it returns, run TestPooledMessageIsNotKeptByGoAMQP on a broker, then move goAMQPCheckedForReuse")
}
