package sessions

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// TestFitting: the candidates are sent in requests the server takes (at
// most proto.MaxArchivableSessions names, a line of at most
// abi.MaxRequestBytes, the request's other fields included), each as
// full as that allows, and every name is sent once, in order.
func TestFitting(t *testing.T) {
	for _, c := range []struct {
		what  string
		name  func(i int) string
		count int
	}{
		{"short names", func(i int) string { return "s" }, 3*proto.MaxArchivableSessions + 7},
		{"longest names", func(i int) string { return fmt.Sprintf("x%0*d", abi.MaxNameLen-1, i) }, 20000},
		{"a few", func(i int) string { return fmt.Sprint("temp-", i) }, 3},
	} {
		names := make([]string, c.count)
		for i := range names {
			names[i] = c.name(i)
		}
		sent := 0
		for rest := names; len(rest) > 0; {
			n := fitting(rest)
			req := proto.NewObject("op", proto.OpArchivable, "scope", abi.ScopeShared, "space", strings.Repeat("p", abi.MaxNameLen), "sessions", rest[:n])
			r, err := proto.ParseRequest(req.Line())
			if err != nil {
				t.Fatalf("%s: a request of %d names (%d bytes) refused: %v", c.what, n, len(req.Line()), err)
			}
			if len(r.Sessions) != n || r.Sessions[0] != names[sent] {
				t.Fatalf("%s: request of %d names holds %d", c.what, n, len(r.Sessions))
			}
			if n < len(rest) && n != proto.MaxArchivableSessions && len(req.Line())+len(rest[n])+3 < requestRoom {
				t.Errorf("%s: a request of %d names (%d bytes) had room for the next", c.what, n, len(req.Line()))
			}
			sent += n
			rest = rest[n:]
		}
		if sent != len(names) {
			t.Errorf("%s: %d of %d names sent", c.what, sent, len(names))
		}
	}
}
