package peer

import (
	"io"
	"net"
	"testing"

	"github.com/ctxfs/ctxfs/session/layout"
)

// FuzzWire: what another host sends the writer (a hello, then a file or
// tree change and its bytes), as hostile as it likes. Nothing panics; a
// hello taken names a socket a host could have or a clean path of the
// tree outside the free trees, never both; a change taken is one a mount
// could have made, within its bounds, its bytes exactly its size; a
// setattr's or a rename's bytes taken decode strictly, a rename's target
// a clean path of the tree.
func FuzzWire(f *testing.F) {
	f.Add([]byte(`{"host":"b","uid":1001,"gid":1001,"kind":"agent","owner":"coder"}`), []byte(`{"op":"append","size":3}`+"\n{}\n"))
	f.Add([]byte(`{"host":"b","uid":0,"gid":0,"path":"home/1001/agent/coder/session/k"}`), []byte(`{"op":"mkdir"}`+"\n"))
	f.Add([]byte(`{"host":"b","uid":1,"gid":1,"path":"shared/team"}`), []byte(`{"op":"setattr","size":12}`+"\n"+`{"gid":1234}`))
	f.Add([]byte(`{"host":"b","uid":1,"gid":1,"path":"home/1/agent/a/session/s"}`), []byte(`{"op":"rename","size":49}`+"\n"+`{"to":"home/1/archived_sessions/a/s","flags":1}`))
	f.Add([]byte(`{"host":"b","uid":1,"gid":1,"kind":"agent","owner":"a","session":"home/1/agent/a/session/s","file":"state"}`), []byte(`{"op":"loss","size":9,"errno":"EINVAL","why":"x"}`+"\n"))
	f.Fuzz(func(t *testing.T, hello, change []byte) {
		if h, err := parseHello(hello); err == nil {
			socket := h.Kind != "" || h.Owner != ""
			if h.Path != "" && (socket || !CleanRel(h.Path) || layout.FreeTree(h.Path)) {
				t.Fatalf("a hello taken with path %q and socket %q %q", h.Path, h.Kind, h.Owner)
			}
			if h.Path == "" && !socket {
				t.Fatalf("a hello taken naming nothing: %+v", h)
			}
		}
		near, far := net.Pipe()
		defer near.Close()
		go func() { far.Write(change); far.Close() }()
		ch, data, err := ReadChange(near)
		if err != nil {
			return
		}
		if ch.check() != nil || (ch.Op != LogLoss && len(data) != ch.Size) || len(data) > MaxChangeBytes {
			t.Fatalf("a change taken: %+v with %d bytes", ch, len(data))
		}
		switch ch.Op {
		case TreeSetattr:
			DecodeAttrs(data)
		case TreeRename:
			if r, err := DecodeRename(data); err == nil && (!CleanRel(r.To) || layout.FreeTree(r.To)) {
				t.Fatalf("a rename taken to %q", r.To)
			}
		}
		io.Copy(io.Discard, near)
	})
}
