// Package testkit holds the checks that the tests of every package share:
// that an error carries the errno the SPEC names, that a step needed by
// the test succeeded, and that an operation wrote nothing (a snapshot of a
// directory tree, byte for byte, and a comparison of two), and the
// running of a race test's readers beside its writer (Beside). It is imported
// by _test.go files only and must never be imported by production code.
package testkit

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
)

// WantErrno fails the test (and goes on) unless err is, or wraps, want:
// a syscall.Errno, an *abi.Error or an *os.PathError around one. Each of
// words must appear in err's text (what a refusal tells its caller).
// what names the operation in the failure.
func WantErrno(t testing.TB, what string, err error, want syscall.Errno, words ...string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v (errno %s), want %s", what, err, abi.ErrnoName(abi.Errno(err)), abi.ErrnoName(want))
		return
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not say %q", what, err, w)
		}
	}
}

// Must stops the test if a step it needs failed.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
