// Package buildinfo says which build a binary is, for --version and the
// server's log: the module version (`go install …@v1.2.0` records it), the
// VCS revision and time when the build recorded them, else the stamp make
// gives (`git describe`, for builds made with -buildvcs=false), and the Go
// version and platform.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// stamp is set by make build: -ldflags "-X …/internal/buildinfo.stamp=$(git describe --always --dirty)".
var stamp string

// Info is what a binary knows of its own build.
type Info struct {
	Version  string `json:"version"` // v1.2.0, or "(devel)" for a build in a checkout
	Stamp    string `json:"stamp,omitempty"`
	Go       string `json:"go"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
}

// Read returns this binary's build information.
func Read() Info {
	i := Info{Version: "(devel)", Stamp: stamp, Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	if bi.Main.Version != "" {
		i.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String is one line for --version, bug reports and the log:
// "v1.2.0 (go1.26.8 linux/amd64)", or for a build in a checkout
// "(devel) 0123456789ab+dirty 2026-01-02T03:04:05Z (go1.26.8 linux/amd64)"
// or "(devel) v0.3-12-g0123456 (go1.26.8 linux/amd64)" (make's stamp).
func (i Info) String() string {
	parts := []string{i.Version}
	if i.Stamp != "" && i.Revision == "" {
		parts = append(parts, i.Stamp)
	}
	if i.Revision != "" {
		rev := i.Revision[:min(12, len(i.Revision))]
		if i.Modified {
			rev += "+dirty"
		}
		parts = append(parts, rev)
	}
	if i.Time != "" {
		parts = append(parts, i.Time)
	}
	parts = append(parts, fmt.Sprintf("(%s %s/%s)", i.Go, runtime.GOOS, runtime.GOARCH))
	return strings.Join(parts, " ")
}

// Version is the module version, or "unknown" for a build that has none.
func Version() string {
	if v := Read().Version; v != "(devel)" {
		return v
	}
	return "unknown"
}
