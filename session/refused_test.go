package session

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/abi"
)

// A refusal's reason is cut to maxLoggedReason bytes, never inside a
// character, and says it was cut; a short one is logged whole.
func TestBoundReason(t *testing.T) {
	if got := abi.Clip("EINVAL: short", maxLoggedReason); got != "EINVAL: short" {
		t.Errorf("short reason: %q", got)
	}
	long := strings.Repeat("a", maxLoggedReason-1) + "é" + strings.Repeat("b", 50) // é straddles the bound
	got := abi.Clip(long, maxLoggedReason)
	if want := strings.Repeat("a", maxLoggedReason-1) + "…"; got != want || !utf8.ValidString(got) {
		t.Errorf("long reason cut to %q, want %q", got, want)
	}
}
