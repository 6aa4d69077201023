// Package versions owns one session's file versions (SPEC 17): the earlier
// content, or the absence, of each file a tool changed, kept under the
// session's versions/ directory in the store, and the proof of that
// history.
//
// The store's shape:
//
//	versions/index.jsonl      one line a version, appended, never rewritten:
//	                          {"v":N,"run":R,"call":C,"path":P,"action":A,"sha256":H,"size":B}
//	versions/sha256/<hex>     a content, named by its SHA-256 (stored once)
//	versions/.seal            the index's seal: its length and digest, MACed
//
// v counts from 1 without gaps. action is "create" (the file did not exist
// before: its earlier state is absence, and the line has no sha256 and no
// size), "modify" (its earlier content is kept) or "delete" (a restore
// removed it; its earlier content is kept). A content is written durably
// (synced, then its directory) before the index line that names it; the
// line is appended and synced, then the seal is replaced durably: a Keep
// has happened when its seal is written. A content no line names (a crash
// between the two) is harmless: its name is its hash, so it says nothing,
// and the next Keep of the same bytes uses it. A line past the seal (a
// crash before the seal) was never acknowledged: it is not history, and
// the next look at the index cuts it.
//
// The seal binds the index to its session (sealedlog.Binding of the
// session's identity) and is keyed with the store's seal key, as the logs'
// seals are: an index or a seal changed behind the server's back, or moved
// from another session, does not verify, and every read of it is EIO; a
// content whose bytes are not its name's is EIO too. Everything is the
// server's (layout.HistoryOwner): users reach it only through the mount,
// read only.
//
// The package reaches the store only through internal/storefs; it decides
// nothing about who may read or keep (the engine does) and never runs a
// tool. Keeps of one session are serialized here (a lock per session
// directory), so the engine need not hold one.
package versions

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path"
	"runtime"
	"sync"
	"syscall"
	"weak"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// The names under a session directory.
const (
	Dir        = abi.DirVersions
	IndexFile  = abi.FileVersionsIndex
	ContentDir = abi.DirVersionsContents
	SealFile   = ".seal" // the index's seal (a dot name: the mount never shows it)
)

// The actions of an index line.
const (
	Create = "create"
	Modify = "modify"
	Delete = "delete"
)

// DefaultLimit bounds the bytes a session's versions/ holds (contents and
// index): a Keep beyond it is EDQUOT and writes nothing. The server's
// bound is quota.Limits.VersionBytes (CTXFS_LIMITS versions=BYTES).
const DefaultLimit int64 = quota.DefaultVersionBytes

// MaxIndex bounds the index, which the mount serves as one copy taken at
// open and every Keep reads whole: beyond it a Keep is EDQUOT, whatever
// Limit says (identical contents cost nothing, their lines do).
const MaxIndex int64 = 4 << 20

// Entry is one version: the state of Path before call Call of run Run
// changed it.
type Entry struct {
	V      int    `json:"v"`
	Run    string `json:"run"`
	Call   string `json:"call"`
	Path   string `json:"path"`
	Action string `json:"action"`
	SHA256 string `json:"sha256,omitempty"` // "" for create: absence
	Size   *int64 `json:"size,omitempty"`   // nil for create
}

// Absent reports whether the entry keeps an absence (action create).
func (en Entry) Absent() bool { return en.SHA256 == "" }

// Store is one session's versions. It holds no descriptor: each call
// opens what it needs, so a Store may outlive a rename of nothing but
// its session (archive and gc move the whole directory; open the Store
// again at the new place).
type Store struct {
	root       *storefs.Root
	key        *sealedlog.Key
	session    string // the session directory, relative to the store
	identity   []byte
	own        storefs.Owner
	Limit      int64 // bytes of versions/ allowed; DefaultLimit from Open
	lock       *sync.Mutex
	identityOK string // "" when the identity could be read; else why not

	// Charge pays for what a Keep adds (the bound on a home's or a
	// space's history, quota.History): taken before anything is written, EDQUOT
	// past it. nil: nobody pays.
	Charge quota.Charge
}

// locks serializes the Keeps and checks of one session directory: a
// mutex per directory while a Store of it holds it. Its entries are weak
// (dropped once their mutex is collected): a Store is opened for every
// restore request of any session and every Keep, and held for good, one
// entry a session directory ever named let a uid that makes, restores
// and deletes sessions grow the server without bound.
var locks sync.Map // session rel -> weak.Pointer[sync.Mutex]

// lockOf is the mutex of the session directory rel.
func lockOf(rel string) *sync.Mutex {
	m := &sync.Mutex{}
	wp := weak.Make(m)
	for {
		v, loaded := locks.LoadOrStore(rel, wp)
		if !loaded {
			runtime.AddCleanup(m, dropLock, lockEntry{rel, wp})
			return m
		}
		held := v.(weak.Pointer[sync.Mutex])
		if had := held.Value(); had != nil {
			return had
		}
		locks.CompareAndDelete(rel, held) // collected, its cleanup not yet run
	}
}

// lockEntry is an entry of locks, as its cleanup drops it.
type lockEntry struct {
	rel string
	wp  weak.Pointer[sync.Mutex]
}

// dropLock drops e once its mutex is gone, unless another took its place.
func dropLock(e lockEntry) { locks.CompareAndDelete(e.rel, e.wp) }

// Open is the versions of the session directory sessionRel (which must
// exist; versions/ is made by the first Keep). key is the store's seal key.
func Open(root *storefs.Root, key *sealedlog.Key, sessionRel string) (*Store, error) {
	st, err := root.Lstat(sessionRel)
	if err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, &storefs.UnsafeError{Op: "versions", Path: root.Show(sessionRel), What: storefs.TypeName(st.Mode) + ", not a directory"}
	}
	perm := os.FileMode(st.Mode).Perm()
	identity, problem := layout.ReadIdentity(root, sessionRel)
	return &Store{
		root: root, key: key, session: sessionRel, identity: identity, identityOK: problem,
		own:   layout.HistoryOwner(storefs.Owner{Uid: int(st.Uid), Gid: int(st.Gid), DirMode: perm, FileMode: perm &^ 0o111}),
		Limit: DefaultLimit, lock: lockOf(sessionRel),
	}, nil
}

func (s *Store) rel(names ...string) string {
	return path.Join(append([]string{s.session, Dir}, names...)...)
}

// ContentRel is where the content of hex is, relative to the store.
func (s *Store) ContentRel(hexSum string) string { return s.rel(ContentDir, hexSum) }

// IndexRel is where the index is, relative to the store.
func (s *Store) IndexRel() string { return s.rel(IndexFile) }

// damaged is the EIO of history that does not verify. It names the file
// as the mount does (relative to the mount's root), never the store's
// path: a refused Keep's words may reach a model.
func (s *Store) damaged(rel, what string) error {
	return &abi.Error{Op: "versions", Path: rel, Errno: syscall.EIO, Msg: what}
}

// Keep records the state of path before call of run changes it: before
// is its content, or nil for a file that did not exist (action must then
// be Create, and only then). It returns the new version's number. Beyond
// the bound it is EDQUOT and nothing is written; an index, seal or content
// that does not verify is EIO and nothing is written.
func (s *Store) Keep(run, call, filePath string, before []byte, action string) (int, error) {
	if err := checkAction(action, before); err != nil {
		return 0, err
	}
	s.lock.Lock()
	defer s.lock.Unlock()
	idx, err := s.index(true)
	if err != nil {
		return 0, err
	}
	// What a Keep a crash interrupted left half written (its replace's
	// temporaries): none is in flight, the lock is ours.
	s.root.RemoveTemps(s.rel(), nil)
	s.root.RemoveTemps(s.rel(ContentDir), nil)
	en := Entry{V: idx.count + 1, Run: run, Call: call, Path: filePath, Action: action}
	var hexSum string
	if before != nil {
		sum := sha256.Sum256(before)
		hexSum = hex.EncodeToString(sum[:])
		size := int64(len(before))
		en.SHA256, en.Size = hexSum, &size
	}
	line, err := json.Marshal(en)
	if err != nil {
		return 0, err
	}
	line = append(line, '\n')
	have, err := s.contentHeld(hexSum, before)
	if err != nil {
		return 0, err
	}
	if err := s.fits(idx, int64(len(line)), hexSum, before); err != nil {
		return 0, err
	}
	// What the disk gains, charged to the session's home: the line, and the
	// content unless a file holds it already (one no line names, a
	// crash's, was charged when it was written).
	add := int64(len(line))
	if before != nil && !have {
		add += int64(len(before))
	}
	if err := s.take(add); err != nil {
		return 0, err
	}
	if kept, err := s.write(idx, line, hexSum, have, before); err != nil {
		s.give(add - kept)
		return 0, err
	}
	return en.V, nil
}

// write writes a Keep: its content, unless held, then its index line.
// kept is what stays of it when it fails: a content written, which no
// line names (Used counts it; the next Keep of those bytes uses it).
func (s *Store) write(idx *index, line []byte, hexSum string, have bool, before []byte) (kept int64, err error) {
	if err := s.makeDirs(); err != nil {
		return 0, err
	}
	if before != nil && !have {
		if err := s.root.ReplaceFile(s.ContentRel(hexSum), before, s.own, storefs.SyncAll); err != nil {
			return 0, err
		}
		kept = int64(len(before))
	}
	return kept, s.append(idx, line)
}

// take charges n bytes to the Store's payer (EDQUOT past its bound).
func (s *Store) take(n int64) error {
	if s.Charge == nil {
		return nil
	}
	return s.Charge.Take(n)
}

// give gives back what take charged for a Keep not written.
func (s *Store) give(n int64) {
	if s.Charge != nil {
		s.Charge.Give(n)
	}
}

// checkAction: create keeps an absence, modify and delete a content.
func checkAction(action string, before []byte) error {
	switch {
	case action == Create && before == nil, (action == Modify || action == Delete) && before != nil:
		return nil
	}
	return abi.Errorf(syscall.EINVAL, "versions", "action %q with content %v", action, before != nil)
}

// contentHeld reports whether the content named hex is stored already
// (then it is not written again); one whose bytes are not its name's is
// EIO, never overwritten silently (fsck names it).
func (s *Store) contentHeld(hexSum string, data []byte) (bool, error) {
	if hexSum == "" {
		return false, nil
	}
	got, err := s.root.ReadFile(s.ContentRel(hexSum), int64(len(data)))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case errors.Is(err, syscall.EFBIG):
		return false, s.damaged(s.ContentRel(hexSum), "content longer than its hash says")
	case err != nil:
		return false, err
	case !bytes.Equal(got, data):
		return false, s.damaged(s.ContentRel(hexSum), "content does not match its hash")
	}
	return true, nil
}

// fits is EDQUOT when the line and (unless the index names it already)
// the content would take versions/ past its bound.
func (s *Store) fits(idx *index, line int64, hexSum string, before []byte) error {
	used, named := idx.used(hexSum)
	add := line
	if !named {
		add += int64(len(before))
	}
	if int64(len(idx.data))+line > MaxIndex {
		return abi.Errorf(syscall.EDQUOT, "versions", "the versions index is full (%d bytes)", MaxIndex)
	}
	if used+add > s.Limit {
		return abi.Errorf(syscall.EDQUOT, "versions", "the session's versions would hold %d bytes, over its limit of %d", used+add, s.Limit)
	}
	return nil
}

// used is the bytes versions/ holds as the index accounts for them: the
// index and each content a line names, once; and whether a line names
// hexSum. A Keep counts from the index it has read: Used lists
// versions/sha256/ and states every content, a system call each (28,000
// small contents: 200 ms a Keep, at every tool call that changes a
// file). A content no line names (left by a crash between its write and
// its line) is not counted: the next Keep of its bytes names it.
func (idx *index) used(hexSum string) (int64, bool) {
	total, seen := int64(len(idx.data)), map[string]bool{}
	for _, en := range idx.entries {
		if !en.Absent() && !seen[en.SHA256] {
			seen[en.SHA256] = true
			total += *en.Size
		}
	}
	return total, seen[hexSum]
}

// Used is the bytes versions/ holds: the index and every content.
func (s *Store) Used() (int64, error) { return Used(s.root, s.session) }

// Used is the bytes the versions/ of the session directory sessionRel
// holds (Store.Used), for a count of a home's history that opens no Store.
func Used(root *storefs.Root, sessionRel string) (int64, error) {
	dir := path.Join(sessionRel, Dir)
	var used int64
	if st, err := root.Lstat(path.Join(dir, IndexFile)); err == nil {
		used += st.Size
	}
	ents, err := root.ReadDir(path.Join(dir, ContentDir))
	if errors.Is(err, fs.ErrNotExist) {
		return used, nil
	}
	if err != nil {
		return 0, err
	}
	for _, ent := range ents {
		if st, err := root.Lstat(path.Join(dir, ContentDir, ent.Name)); err == nil {
			used += st.Size
		}
	}
	return used, nil
}

// makeDirs makes versions/ and versions/sha256/, owned as the session's
// history, each made durable in its parent.
func (s *Store) makeDirs() error {
	for _, dir := range []string{s.rel(), s.rel(ContentDir)} {
		err := s.root.MkdirOwned(dir, s.own)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := s.root.SyncDir(path.Dir(dir)); err != nil {
			return err
		}
	}
	return nil
}

// append adds line to the index (synced), then seals the index with it
// (replaced durably): the Keep's commit.
func (s *Store) append(idx *index, line []byte) error {
	f, err := s.root.OpenFile(s.IndexRel(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, s.own.FileMode)
	if err != nil {
		return err
	}
	defer f.Close()
	if idx.fresh {
		if err := storefs.Fchown(f, s.own); err != nil {
			return err
		}
	}
	if _, err := f.Write(line); err != nil {
		return err
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return err
	}
	if idx.fresh {
		if err := s.root.SyncDir(s.rel()); err != nil {
			return err
		}
	}
	data := append(idx.data[:len(idx.data):len(idx.data)], line...)
	return s.root.ReplaceFile(s.rel(SealFile), s.seal(data), s.own, storefs.SyncAll)
}

// List is every version, oldest first. EIO when the index does not verify.
func (s *Store) List() ([]Entry, error) {
	s.lock.Lock()
	idx, err := s.index(true)
	s.lock.Unlock()
	if err != nil {
		return nil, err
	}
	return idx.entries, nil
}

// Content is the content version v keeps (nil for a create's absence):
// ENOENT for no such version, EIO when the index or the content does not
// verify.
func (s *Store) Content(v int) ([]byte, error) {
	entries, err := s.List()
	if err != nil {
		return nil, err
	}
	if v < 1 || v > len(entries) {
		return nil, abi.Errorf(syscall.ENOENT, "versions", "no version %d", v)
	}
	return s.EntryContent(entries[v-1])
}

// EntryContent is the content en, a version List gave, keeps (nil for a
// create's absence): EIO when it does not verify. A caller that wants
// the contents of many versions lists once and asks this of each: each
// Content reads and verifies the whole index again (up to MaxIndex).
func (s *Store) EntryContent(en Entry) ([]byte, error) {
	if en.Absent() {
		return nil, nil
	}
	return s.readContent(en.SHA256, *en.Size)
}

// readContent reads and verifies the content named hexSum.
func (s *Store) readContent(hexSum string, size int64) ([]byte, error) {
	rel := s.ContentRel(hexSum)
	b, err := s.root.ReadFile(rel, size)
	switch {
	case errors.Is(err, syscall.EFBIG):
		return nil, s.damaged(rel, "content longer than its index line says")
	case errors.Is(err, fs.ErrNotExist):
		return nil, s.damaged(rel, "content missing")
	case err != nil:
		return nil, err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexSum {
		return nil, s.damaged(rel, "content does not match its hash")
	}
	return b, nil
}

// sealMagic starts a seal; the layout is magic, length (8 bytes, big
// endian), SHA-256 of the index, MAC of everything before it and the
// binding.
const sealMagic = "CTXVER1\n"

const sealSize = len(sealMagic) + 8 + sha256.Size + sha256.Size

// seal is the seal of an index holding data.
func (s *Store) seal(data []byte) []byte {
	sum := sha256.Sum256(data)
	b := make([]byte, 0, sealSize)
	b = append(b, sealMagic...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(data)))
	b = append(b, sum[:]...)
	return append(b, s.key.Sum(s.macked(b))...)
}

// macked is what a seal's MAC covers: its fields and the binding to this
// session's index.
func (s *Store) macked(fields []byte) []byte {
	bind := sealedlog.Binding(s.identity, Dir+"/"+IndexFile)
	return append(append([]byte(nil), fields...), bind[:]...)
}

// sealed reads the seal: the index length and digest it vouches for.
func (s *Store) sealed() (int64, []byte, error) {
	rel := s.rel(SealFile)
	b, err := s.root.ReadFile(rel, int64(sealSize))
	switch {
	case errors.Is(err, syscall.EFBIG):
		return 0, nil, s.damaged(rel, "seal too long")
	case err != nil:
		return 0, nil, err
	case len(b) != sealSize || string(b[:len(sealMagic)]) != sealMagic:
		return 0, nil, s.damaged(rel, "not a versions seal")
	}
	fields := b[:sealSize-sha256.Size]
	if !s.key.Verifies(s.macked(fields), b[len(fields):]) {
		return 0, nil, s.damaged(rel, "seal does not verify (forged, moved from another session, or from another store)")
	}
	n := int64(binary.BigEndian.Uint64(b[len(sealMagic):]))
	return n, b[len(sealMagic)+8 : len(fields)], nil
}
