package integration

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestFreeTreeWriteClearsSetID: in a shared session's context/, a member
// writes another member's group-writable setuid file (and a setgid one
// its group may run): the write succeeds and the bits are cleared, as
// on a local filesystem, and so does a truncate. The write failed (EIO): the kernel clears the
// bits first with a SETATTR of the mode, which the server made as the
// writer, who may not chmod a file it does not own.
func TestFreeTreeWriteClearsSetID(t *testing.T) {
	s, a, b, ctxDir := sharedContext(t)
	for _, mode := range []string{"4770", "2770"} {
		f := filepath.Join(ctxDir, "f"+mode)
		if out, err := runCmd(t, a, nil, "sh", "-c", "echo one > "+f+" && chmod "+mode+" "+f); err != nil {
			t.Fatalf("a member's file: %v %s", err, out)
		}
		if st := statStore(t, s.storePath(f)); fmt.Sprintf("%o", st.Mode&0o7777) != mode {
			t.Fatalf("the member's file is mode %o, not %s", st.Mode&0o7777, mode)
		}
		if out, err := runCmd(t, b, nil, "sh", "-c", "echo two >> "+f); err != nil {
			t.Fatalf("another member writes a %s file: %v %s", mode, err, out)
		}
		if st := statStore(t, s.storePath(f)); st.Mode&0o7777 != 0o770 || fileBytes(t, f) != "one\ntwo\n" {
			t.Fatalf("the %s file after another member's write: mode %o, %q", mode, st.Mode&0o7777, fileBytes(t, f))
		}
		// A truncate through an open file (ftruncate) clears them too.
		if out, err := runCmd(t, a, nil, "chmod", mode, f); err != nil {
			t.Fatalf("chmod %s: %v %s", mode, err, out)
		}
		if out, err := runCmd(t, b, nil, "truncate", "-s", "2", f); err != nil {
			t.Fatalf("another member truncates a %s file: %v %s", mode, err, out)
		}
		if st := statStore(t, s.storePath(f)); st.Mode&0o7777 != 0o770 || st.Size != 2 {
			t.Fatalf("the %s file after another member's truncate: mode %o, size %d", mode, st.Mode&0o7777, st.Size)
		}
		// Its owner's own chmod still sets and clears them.
		if out, err := runCmd(t, a, nil, "sh", "-c", "chmod "+mode+" "+f+" && chmod u-s,g-s "+f); err != nil {
			t.Fatalf("the owner's chmod: %v %s", err, out)
		}
	}
}
