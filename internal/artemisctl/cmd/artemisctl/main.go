// Command artemisctl is what scripts/artemis runs: the local Artemis
// brokers of the repository (see package artemisctl).
//
//	artemisctl [--root DIR] COMMAND [ARGS...]
//
// DIR is the repository root (default: the working directory); the
// commands and environment variables are those of scripts/artemis.
package main

import (
	"os"

	"github.com/babelqueue/babelqueue-go-artemis/internal/artemisctl"
)

func main() {
	args := os.Args[1:]
	root := "."
	if len(args) >= 2 && args[0] == "--root" {
		root, args = args[1], args[2:]
	}
	os.Exit(artemisctl.Main(root, args, os.Environ(), os.Stdin, os.Stdout, os.Stderr, true))
}
