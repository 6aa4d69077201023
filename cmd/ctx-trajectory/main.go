// Command ctx-trajectory builds a session's ATIF document for
// `ctx agent trajectory`, which runs it with the session's logs open
// (internal/cli/trajexport says why it is a program of its own). It is
// installed beside ctx and is not meant to be run by hand.
package main

import (
	"os"

	"github.com/ctxfs/ctxfs/internal/cli/trajexport"
)

func main() {
	os.Exit(trajexport.Main(os.Args[1:], os.Stdout, os.Stderr))
}
