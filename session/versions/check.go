package versions

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// Check verifies the file of the session sessionRel (relative to the
// store) named file ("versions/index.jsonl", "versions/sha256/<hex>": a
// layout.PlaceVersion's File) before the mount serves it: the index
// against its seal (cutting a line a crash left unsealed), a content
// against its name. EIO when it does not verify.
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
		s.lock.Lock()
		defer s.lock.Unlock()
		_, err := s.index(true)
		return err
	case strings.HasPrefix(below, ContentDir+"/"):
		return s.checkContent(strings.TrimPrefix(below, ContentDir+"/"))
	}
	return nil
}

// checkContent hashes the content named hexSum and compares.
func (s *Store) checkContent(hexSum string) error {
	rel := s.ContentRel(hexSum)
	f, err := s.root.OpenFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if hex.EncodeToString(h.Sum(nil)) != hexSum {
		return s.damaged(rel, "content does not match its hash")
	}
	return nil
}

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
