package main

import (
	"encoding/json"
	"fmt"

	"github.com/ctxfs/ctxfs/internal/buildinfo"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

// versionString is the one line of --version and `ctx version` after
// "ctx ".
func versionString() string { return buildinfo.Read().String() }

func runVersion(e *clienv.Env, p *clienv.Parsed) int {
	if p.On("json") {
		json.NewEncoder(e.Stdout).Encode(buildinfo.Read())
	} else {
		fmt.Fprintf(e.Stdout, "ctx %s\n", versionString())
	}
	return clienv.ExitOK
}
