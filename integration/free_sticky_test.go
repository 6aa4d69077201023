package integration

import (
	"path/filepath"
	"testing"
)

// TestFreeTreeMkdirKeepsSticky: a directory made sticky by mkdir(2)
// itself (mode 01777, as Python's os.mkdir or a program making its own
// tmp/ asks) is sticky in a shared session's context/, so another member
// may not remove or rename what a member made there: the bit was dropped
// at the mkdir, and any member removed anyone's files.
func TestFreeTreeMkdirKeepsSticky(t *testing.T) {
	s, a, b, ctxDir := sharedContext(t)
	dir := filepath.Join(ctxDir, "tmp")
	if out, err := runCmd(t, a, nil, "/usr/bin/python3", "-c", "import os, sys; os.umask(0); os.mkdir(sys.argv[1], 0o1777); open(sys.argv[1] + '/mine', 'w').close()", dir); err != nil {
		t.Fatalf("a sticky directory: %v %s", err, out)
	}
	if st := statStore(t, s.storePath(dir)); st.Mode&0o1777 != 0o1777 { // and setgid, from context/
		t.Fatalf("the directory made with mode 1777 is %o on the store", st.Mode&0o7777)
	}
	if out, err := runCmd(t, b, nil, "rm", "-f", filepath.Join(dir, "mine")); err == nil {
		t.Fatalf("another member removed a member's file from a sticky directory: %s", out)
	}
}
