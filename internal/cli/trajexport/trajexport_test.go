package trajexport

import (
	"bytes"
	"strings"
	"testing"
)

// TestMainByHand: run without the arguments ctx gives it, the program
// says so (exit 2) and prints nothing on standard output.
func TestMainByHand(t *testing.T) {
	for _, args := range [][]string{nil, {"s"}, {"s", "coder", "x"}, {"s", "coder", "events", "x"}} {
		var out, errOut bytes.Buffer
		if code := Main(args, &out, &errOut); code != 2 || out.Len() != 0 || !strings.Contains(errOut.String(), "not by hand") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errOut.String())
		}
	}
}
