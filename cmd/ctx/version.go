package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// buildInfo is what the binary knows of its own build: the module version
// (`go install …@v1.2.0` sets it; a build in the source tree is "(devel)")
// and, when the build recorded them, the VCS revision and time.
type buildInfo struct {
	Version  string `json:"version"`
	Go       string `json:"go"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: "(devel)", Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// versionString is the one line of --version and `ctx version` after
// "ctx ": "v1.2.0 (go1.26.8 linux/amd64)", or for a development build
// "(devel) 0123456789ab+dirty 2026-01-02T03:04:05Z (go1.26.8 linux/amd64)".
func versionString() string {
	b := readBuildInfo()
	parts := []string{b.Version}
	if b.Revision != "" {
		rev := b.Revision[:min(12, len(b.Revision))]
		if b.Modified {
			rev += "+dirty"
		}
		parts = append(parts, rev)
	}
	if b.Time != "" {
		parts = append(parts, b.Time)
	}
	parts = append(parts, fmt.Sprintf("(%s %s/%s)", b.Go, runtime.GOOS, runtime.GOARCH))
	return strings.Join(parts, " ")
}

// buildVersion is this ctx's module version, or "unknown" for a build
// that has none (ATIF requires some version string).
func buildVersion() string {
	if v := readBuildInfo().Version; v != "(devel)" {
		return v
	}
	return "unknown"
}

func runVersion(e *env, p *parsed) int {
	if p.on("json") {
		json.NewEncoder(e.stdout).Encode(readBuildInfo())
	} else {
		fmt.Fprintf(e.stdout, "ctx %s\n", versionString())
	}
	return exitOK
}
