package trampoline

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/internal/memfile"
)

// A trampoline (EnterMain, JailMain) starts with trampolineEnv and nothing
// else: neither the server's environment nor the run's reaches the ctxfs
// binary, so no LD_PRELOAD, LD_LIBRARY_PATH, GCONV_PATH or GODEBUG line of a
// definition ever applies to a process that runs as root (the jail's) or
// that runs the server's own code. The run's environment (CTX_*, PATH, the
// definition's env lines) comes on descriptor envFD, a memory file of
// NUL-separated KEY=VALUE entries, never in argv (a root process's argv is
// world-readable in /proc); the trampoline applies it only at the final
// execve of the agent's program, after the uid change.
const envFD = 4

// trampolineEnv is the whole environment a trampoline starts with: none.
// (A nil Env would make exec.Cmd pass the server's own.)
var trampolineEnv = []string{}

// maxEnvBytes bounds the run's environment a trampoline reads: the
// kernel's own limit on one execve's strings is far below it.
const maxEnvBytes = 4 << 20

// envFile holds env in a memory file positioned at its start. An entry
// with a NUL in it could not be passed to execve; it is left out rather
// than split into two.
func envFile(env []string) (*os.File, error) {
	var b bytes.Buffer
	for _, e := range env {
		if !strings.ContainsRune(e, 0) {
			b.WriteString(e)
			b.WriteByte(0)
		}
	}
	return memfile.New("ctxfs-env", b.String())
}

// readEnvFD reads and closes the run's environment in a trampoline.
func readEnvFD() ([]string, error) {
	f := os.NewFile(envFD, "env")
	if f == nil {
		return nil, syscall.EBADF
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxEnvBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading the run's environment: %w", err)
	case len(b) > maxEnvBytes:
		return nil, fmt.Errorf("the run's environment is over %d bytes: %w", maxEnvBytes, syscall.E2BIG)
	}
	return parseEnv(b), nil
}

// parseEnv reads what envFile wrote: the entries, each KEY=VALUE.
func parseEnv(b []byte) []string {
	var env []string
	for _, e := range strings.Split(string(b), "\x00") {
		if strings.Contains(e, "=") {
			env = append(env, e)
		}
	}
	return env
}
