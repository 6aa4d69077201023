package versions

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/session/layout"
)

// index is the index as its seal vouches for it.
type index struct {
	data    []byte // the sealed bytes
	entries []Entry
	count   int
	fresh   bool // no index file yet
}

// index reads and verifies the index against its seal. A line past the
// seal (a Keep a crash interrupted before it committed) is not history:
// it is cut when cut is set (the caller holds the lock), else left out.
// Anything else that does not verify is EIO.
//
// The seal is read before the index: a Keep appends its line, then
// seals, and only a cut (under the lock, to what the seal says) makes
// the index shorter, so an index read after a seal holds at least what
// that seal vouches for even beside a Keep (fsck reads without the lock).
func (s *Store) index(cut bool) (*index, error) {
	if s.identityOK != "" {
		return nil, s.damaged(s.session, s.identityOK)
	}
	n, digest, sealErr := s.sealed()
	if sealErr != nil && !errors.Is(sealErr, fs.ErrNotExist) {
		return nil, sealErr
	}
	data, err := s.indexData()
	if err == nil && sealErr != nil && bytes.Count(data, []byte("\n")) > 1 {
		// More than a first Keep's line and no seal when we looked: a
		// Keep may have sealed since. Look again, the seal first.
		n, digest, sealErr = s.sealed()
		if sealErr == nil {
			data, err = s.indexData()
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist) && sealErr == nil:
		return nil, s.damaged(s.IndexRel(), "index missing")
	case errors.Is(err, fs.ErrNotExist):
		return &index{fresh: true}, nil // no index is an empty history
	case err != nil:
		return nil, err
	}
	if errors.Is(sealErr, fs.ErrNotExist) {
		// A first Keep interrupted between its line and its seal leaves
		// at most that line; more is an index whose seal was taken away.
		if bytes.Count(data, []byte("\n")) > 1 {
			return nil, s.damaged(s.rel(SealFile), "seal missing")
		}
		n, digest, sealErr = 0, emptyDigest[:], nil
	}
	if sealErr != nil {
		return nil, sealErr
	}
	if int64(len(data)) < n {
		return nil, s.damaged(s.IndexRel(), "index shorter than its seal says")
	}
	if sum := sha256.Sum256(data[:n]); !bytes.Equal(sum[:], digest) {
		return nil, s.damaged(s.IndexRel(), "index does not match its seal")
	}
	if int64(len(data)) > n && cut {
		if err := s.cutTo(n); err != nil {
			return nil, err
		}
	}
	return s.parse(data[:n])
}

// indexData reads the index's bytes, up to the one unsealed line past
// its bound; longer is EIO.
func (s *Store) indexData() ([]byte, error) {
	data, err := s.root.ReadFile(s.IndexRel(), MaxIndex+int64(len(maxLine)))
	if errors.Is(err, syscall.EFBIG) {
		return nil, s.damaged(s.IndexRel(), "index longer than any the server writes")
	}
	return data, err
}

var emptyDigest = sha256.Sum256(nil)

// maxLine is room for the one unsealed line a crash may leave past the
// index's bound.
var maxLine = make([]byte, 64<<10)

// cutTo cuts the index back to the n bytes its seal vouches for, durably.
func (s *Store) cutTo(n int64) error {
	f, err := s.root.OpenFile(s.IndexRel(), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(n); err != nil {
		return err
	}
	return unix.Fdatasync(int(f.Fd()))
}

// parse reads the sealed lines. The seal vouches that the server wrote
// them, so a line that does not parse is a bug, reported as damage all
// the same.
func (s *Store) parse(data []byte) (*index, error) {
	idx := &index{data: data}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(maxLine))
	for sc.Scan() {
		var en Entry
		if err := json.Unmarshal(sc.Bytes(), &en); err != nil || en.V != idx.count+1 || checkEntry(en) != nil {
			return nil, s.damaged(s.IndexRel(), "bad line "+sc.Text())
		}
		idx.entries = append(idx.entries, en)
		idx.count++
	}
	if sc.Err() != nil {
		return nil, s.damaged(s.IndexRel(), sc.Err().Error())
	}
	return idx, nil
}

// checkEntry: a create has no content; the others name one.
func checkEntry(en Entry) error {
	if en.Absent() != (en.Size == nil) || !en.Absent() && !layout.ValidContentName(en.SHA256) {
		return errors.New("bad content")
	}
	if en.Absent() {
		return checkAction(en.Action, nil)
	}
	return checkAction(en.Action, []byte{})
}
