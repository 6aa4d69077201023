package main

import (
	"encoding/json"
	"fmt"

	"github.com/ctxfs/ctxfs/internal/buildinfo"
)

// versionString is the one line of --version and `ctx version` after
// "ctx ".
func versionString() string { return buildinfo.Read().String() }

// buildVersion is this ctx's module version, or "unknown" for a build
// that has none (ATIF requires some version string).
func buildVersion() string { return buildinfo.Version() }

func runVersion(e *Env, p *Parsed) int {
	if p.On("json") {
		json.NewEncoder(e.Stdout).Encode(buildinfo.Read())
	} else {
		fmt.Fprintf(e.Stdout, "ctx %s\n", versionString())
	}
	return ExitOK
}
