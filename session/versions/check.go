package versions

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/filestamp"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// Check verifies the file of the session sessionRel (relative to the
// store) named file ("versions/index.jsonl", "versions/sha256/<hex>": a
// layout.PlaceVersion's File) before the mount serves it: the index
// against its seal (cutting a line a crash left unsealed), a content
// against its name (each once per file version: sound). EIO when it does
// not verify.
func Check(root *storefs.Root, key *sealedlog.Key, sessionRel, file string) error {
	below, ok := strings.CutPrefix(file, Dir+"/")
	if !ok {
		return nil
	}
	s, err := Open(root, key, sessionRel)
	if err != nil {
		return err
	}
	switch {
	case below == IndexFile:
		return s.checkIndex()
	case strings.HasPrefix(below, ContentDir+"/"):
		return s.checkContent(strings.TrimPrefix(below, ContentDir+"/"))
	}
	return nil
}

// checkIndex verifies the index against its seal, unless these very
// files (the index's and the seal's stamps, taken under the lock, where
// the server is their only writer) were found sound before and are
// unchanged since: a check reads, hashes and parses the whole index (up
// to MaxIndex).
func (s *Store) checkIndex() error {
	s.lock.Lock()
	defer s.lock.Unlock()
	seen, stamped := s.indexStamps()
	if _, known := sound.Get(seen); stamped && known {
		return nil
	}
	if _, err := s.index(true); err != nil {
		return err
	}
	// Remembered only when the check changed nothing (it cuts a line a
	// crash left past the seal) and the files' times tell the next change.
	if after, ok := s.indexStamps(); ok && stamped && after == seen {
		sound.Keep(seen, struct{}{}, filestamp.RacyWindow, seen.stamp, seen.seal)
	}
	return nil
}

// indexStamps is the index as sound remembers it: its path with the
// session's identity (the seal binds the index to it) and the stamps of
// it and its seal; false when the identity cannot be read or a file
// cannot be stated.
func (s *Store) indexStamps() (soundKey, bool) {
	if s.identityOK != "" {
		return soundKey{}, false
	}
	idx, err := s.root.Lstat(s.IndexRel())
	if err != nil {
		return soundKey{}, false
	}
	seal, err := s.root.Lstat(s.rel(SealFile))
	if err != nil {
		return soundKey{}, false
	}
	name := s.IndexRel() + "\n" + string(s.identity)
	return soundKey{name: name, stamp: filestamp.Of(idx), seal: filestamp.Of(seal)}, true
}

// checkContent hashes the content named hexSum and compares, unless
// this very file (its stamp: inode, size, times) was found sound before.
func (s *Store) checkContent(hexSum string) error {
	rel := s.ContentRel(hexSum)
	f, err := s.root.OpenFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	seen := soundKey{name: hexSum, stamp: filestamp.Of(&st)}
	if _, ok := sound.Get(seen); ok {
		return nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if hex.EncodeToString(h.Sum(nil)) != hexSum {
		return s.damaged(rel, "content does not match its hash")
	}
	sound.Keep(seen, struct{}{}, filestamp.RacyWindow, seen.stamp)
	return nil
}

// soundKey is a file found sound: a content's name and its file's stamp,
// taken before it was hashed, or the index's (indexStamps) and its
// seal's. Any change to a file moves its ctime (a file replaced is
// another inode), so a stamp seen again is the same bytes; one changed
// too recently for its times to tell the next change apart is never
// remembered (filestamp.RacyWindow).
type soundKey struct {
	name        string
	stamp, seal filestamp.Stamp // seal: the zero Stamp for a content
}

// maxSound bounds what sound remembers (about 300 bytes each).
const maxSound = 4096

// sound is the files found sound. Each open through the mount is
// verified, and hashing a content at every open (8 MiB: 8 ms of the
// server's CPU) let a uid opening one in a loop keep a core busy for
// nothing; a content never changes, so it is hashed once per file; the
// index (37 ms an open at 3.8 MiB, holding the session's lock) once per
// Keep. Past maxSound it starts over.
var sound = filestamp.NewMemo[soundKey, struct{}](maxSound)

// Problem is one thing Verify found: the store file (as root.Show names
// it) and what is wrong.
type Problem struct{ Path, What string }

// Verify is what does not verify in the versions of the session
// sessionRel (ctxfs fsck): the index against its seal, and each content
// a line names against its hash. It changes nothing (a line a crash left
// past the seal is left for the next Keep to cut: it is not history). A
// session without versions/ has nothing to verify.
func Verify(root *storefs.Root, key *sealedlog.Key, sessionRel string) []Problem {
	s, err := Open(root, key, sessionRel)
	if err != nil {
		return []Problem{problemOf(root, sessionRel, err)}
	}
	if _, err := root.Lstat(s.rel()); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	idx, err := s.index(false)
	if err != nil {
		return []Problem{problemOf(root, s.IndexRel(), err)}
	}
	var problems []Problem
	seen := map[string]bool{}
	for _, en := range idx.entries {
		if en.Absent() || seen[en.SHA256] {
			continue
		}
		seen[en.SHA256] = true
		if _, err := s.readContent(en.SHA256, *en.Size); err != nil {
			problems = append(problems, problemOf(root, s.ContentRel(en.SHA256), err))
		}
	}
	return problems
}

// problemOf words err about rel as fsck reports it.
func problemOf(root *storefs.Root, rel string, err error) Problem {
	var ae *abi.Error
	if errors.As(err, &ae) && ae.Msg != "" {
		return Problem{Path: root.Show(ae.Path), What: ae.Msg}
	}
	return Problem{Path: root.Show(rel), What: storefs.Words(err)}
}
