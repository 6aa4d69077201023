package integration

import (
	"os"
	"syscall"
	"testing"
)

// TestIndexEntriesAreRegularFiles: index entries are regular files, never
// symlinks (SPEC 9): a symlink, a hard link, a FIFO, a directory or a
// rename made in index/, by-hash/ or by-uuid/ is EPERM and writes
// nothing; an entry made the ordinary way is a regular file.
func TestIndexEntriesAreRegularFiles(t *testing.T) {
	s := newFuseServer(t)
	s.send("a", "a1", "hello")
	settle()
	idx := s.mnt(coderRel + "/session/index")
	const uuid = "123e4567-e89b-12d3-a456-426614174000"
	if err := os.WriteFile(idx+"/by-hash/h1", []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idx+"/by-uuid/"+uuid, []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{idx + "/by-hash/h1", idx + "/by-uuid/" + uuid, idx + "/current"} {
		if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s: %v, %v; want a regular file", p, st, err)
		}
	}
	settle()
	for _, dir := range []string{idx, idx + "/by-hash", idx + "/by-uuid"} {
		key := "k2"
		if dir == idx+"/by-uuid" {
			key = "123e4567-e89b-12d3-a456-426614174001"
		}
		p := dir + "/" + key
		refusal(t, s, "symlink "+p, syscall.EPERM, func() error { return os.Symlink("a", p) })
		refusal(t, s, "symlink to the session "+p, syscall.EPERM, func() error { return os.Symlink("../../a", p) })
		refusal(t, s, "hard link "+p, syscall.EPERM, func() error { return os.Link(idx+"/by-hash/h1", p) })
		refusal(t, s, "FIFO "+p, syscall.EPERM, func() error { return syscall.Mkfifo(p, 0o600) })
		refusal(t, s, "mkdir "+p, syscall.EPERM, func() error { return os.Mkdir(p, 0o700) })
	}
	refusal(t, s, "rename a by-hash entry", syscall.EPERM, func() error { return os.Rename(idx+"/by-hash/h1", idx+"/by-hash/h2") })
	refusal(t, s, "rename a by-uuid entry to by-hash", syscall.EPERM, func() error { return os.Rename(idx+"/by-uuid/"+uuid, idx+"/by-hash/h3") })
}
