package sealedlog

import (
	"bytes"
	"os"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestCreateWith: a log made with content is sealed for it (it verifies,
// reopens at its length and takes appends after it); content that is
// not whole log lines is EINVAL, and nothing is made.
func TestCreateWith(t *testing.T) {
	p, s := paths(t)
	content := append(line(1), line(2)...)
	l, err := CreateWith(at(t, p, s), anyOwner, content)
	testkit.Must(t, err)
	testkit.Must(t, l.Close())
	if probs := Verify(at(t, p, s)); len(probs) > 0 {
		t.Fatalf("a log created with content does not verify: %s", whats(probs))
	}
	l, err = Open(at(t, p, s))
	testkit.Must(t, err)
	t.Cleanup(func() { l.Close() })
	if l.Size() != int64(len(content)) || l.Check() != nil {
		t.Fatalf("reopened: size %d (want %d), check %v", l.Size(), len(content), l.Check())
	}
	mustAppend(t, l, line(3))
	if got := readAll(t, l); !bytes.Equal(got, append(content, line(3)...)) {
		t.Errorf("after an append: %q", got)
	}

	for _, bad := range [][]byte{[]byte("not json\n"), line(1)[:10], []byte("{}\n{")} {
		p, s := paths(t)
		_, err := CreateWith(at(t, p, s), anyOwner, bad)
		testkit.WantErrno(t, string(bad), err, syscall.EINVAL)
		for _, f := range []string{p, s} {
			if _, err := os.Lstat(f); err == nil {
				t.Errorf("%q: %s was made", bad, f)
			}
		}
	}
}
