package sealedlog

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// Key is a store's seal key: the secret every seal record's MAC is keyed
// with. It lives in the server's own directory of the store (root's, 0700,
// never served, never below a tree a user or a jailed program can reach),
// so a user who could write their log and seal still cannot write a record
// that verifies.
//
// The key file's name says how far the store is: KeyFile once every seal
// is keyed; MigratingKeyFile while the seals of a store made before keys
// are being rewritten keyed (Rekey), when unkeyed records are still
// accepted; neither for a store no keyed server has opened. Renaming
// MigratingKeyFile to KeyFile is the migration's commit: from then on an
// unkeyed record is forged.
type Key struct {
	secret  []byte // nil: no key (fsck of a store never migrated)
	unkeyed bool   // unkeyed (CTXSEAL2) records are accepted: the store is not yet migrated
}

// The key files, in the store's state directory.
const (
	KeyFile          = "seal.key"
	MigratingKeyFile = "seal.key.migrating"
	keySize          = 32
)

// NewKey is a key with the given secret, under which only keyed records
// verify. (The server reads its key with OpenKey; tests and tools that
// make seals of their own use this.)
func NewKey(secret []byte) *Key {
	return &Key{secret: append([]byte(nil), secret...)}
}

// mac is the HMAC-SHA256 of b under the key. A key without a secret
// cannot make records: that would be a bug, not a state of the store.
func (k *Key) mac(b []byte) []byte {
	if k == nil || k.secret == nil {
		panic("sealedlog: a seal record written without the store's key")
	}
	m := hmac.New(sha256.New, k.secret)
	m.Write(b)
	return m.Sum(nil)
}

// verifies reports whether sum is the MAC of b under the key.
func (k *Key) verifies(b, sum []byte) bool {
	return k.hasSecret() && hmac.Equal(k.mac(b), sum)
}

// Sum and Verifies are the key's MAC for a record kept outside a log's
// seal (session/versions: the seal of a session's versions index), so
// that it proves who wrote it as a log's seal does.
func (k *Key) Sum(b []byte) []byte         { return k.mac(b) }
func (k *Key) Verifies(b, sum []byte) bool { return k.verifies(b, sum) }

func (k *Key) hasSecret() bool { return k != nil && k.secret != nil }

func (k *Key) acceptsUnkeyed() bool { return k != nil && k.unkeyed }

// Migrating reports whether the store's seals are still being made keyed:
// the caller rewrites each (Rekey), then calls Migrated.
func (k *Key) Migrating() bool { return k.unkeyed }

// OpenKey reads the store's seal key from the directory dir of root, or
// makes one (32 bytes from getrandom, root's, 0600) when the store has
// none: durably (written, synced, renamed, the directory synced) and as
// MigratingKeyFile, since a store without a key may hold unkeyed seals.
// It is for the one process that holds the store (the server, fsck
// --repair).
func OpenKey(root *storefs.Root, dir string) (*Key, error) {
	if err := finishMoves(root, dir); err != nil {
		return nil, err
	}
	k, err := ReadKey(root, dir)
	if err != nil || k.secret != nil {
		return k, err
	}
	secret := make([]byte, keySize)
	if _, err := rand.Read(secret); err != nil { // getrandom(2)
		return nil, err
	}
	if err := writeKeyFile(root, path.Join(dir, MigratingKeyFile), secret); err != nil {
		return nil, err
	}
	return &Key{secret: secret, unkeyed: true}, nil
}

// ReadKey reads the store's seal key and changes nothing: a Key without a
// secret, accepting only unkeyed records, when the store has none yet
// (fsck of a store made before keys). A key file that is not 32 bytes is
// EIO: the store's seals cannot be checked.
func ReadKey(root *storefs.Root, dir string) (*Key, error) {
	for _, f := range []struct {
		name      string
		migrating bool
	}{{KeyFile, false}, {MigratingKeyFile, true}} {
		rel := path.Join(dir, f.name)
		b, err := root.ReadFile(rel, keySize+1)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, osError("read seal key", root.Show(rel), err)
		case len(b) != keySize:
			return nil, abi.Errorf(syscall.EIO, "read seal key", "%s: %d bytes, want %d: the store's seals cannot be checked", root.Show(rel), len(b), keySize)
		}
		return &Key{secret: b, unkeyed: f.migrating}, nil
	}
	return &Key{unkeyed: true}, nil
}

// finishMoves finishes the key moves a crash cut between link and unlink
// (storefs.Move's portable way): the old name is a second name of the
// moved key, taken away before anything writes a temporary again.
func finishMoves(root *storefs.Root, dir string) error {
	for _, m := range [][2]string{{KeyFile + ".tmp", KeyFile}, {MigratingKeyFile + ".tmp", MigratingKeyFile}, {MigratingKeyFile, KeyFile}} {
		if err := root.FinishMove(path.Join(dir, m[0]), path.Join(dir, m[1])); err != nil {
			return osError("open seal key", root.Show(path.Join(dir, m[0])), err)
		}
	}
	return nil
}

// writeKeyFile makes rel hold secret, durably: written to rel+".tmp"
// (what a crash left there is removed first, never written through: it
// may be a second name of a key, see finishMoves), synced, renamed, the
// directory synced. It never replaces a key that is there: two keys for
// one store would make half its seals unprovable.
func writeKeyFile(root *storefs.Root, rel string, secret []byte) error {
	tmp := rel + ".tmp"
	if err := root.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return osError("create seal key", root.Show(tmp), err)
	}
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return osError("create seal key", root.Show(tmp), err)
	}
	_, err = f.Write(secret)
	if err == nil {
		err = f.Chmod(0o600) // a leftover of a crash had its own mode
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Move(tmp, rel)
	}
	if err == nil {
		err = root.SyncDir(path.Dir(rel))
	}
	if err != nil {
		root.Remove(tmp)
		return osError("create seal key", root.Show(rel), err)
	}
	return nil
}

// Migrated ends the migration: every seal is keyed, so MigratingKeyFile
// becomes KeyFile (durably), and from now on an unkeyed record is forged.
func (k *Key) Migrated(root *storefs.Root, dir string) error {
	from, to := path.Join(dir, MigratingKeyFile), path.Join(dir, KeyFile)
	if err := root.Move(from, to); err != nil {
		return osError("migrate seals", root.Show(to), err)
	}
	if err := root.SyncDir(dir); err != nil {
		return osError("migrate seals", root.Show(dir), err)
	}
	k.unkeyed = false
	return nil
}

// Rekey rewrites the seal of at, when it holds unkeyed records, with the
// same records keyed under at.Key: the store's migration, done before any
// log is opened or the journal replayed. It re-judges nothing: a record
// says the same after as before (the log is judged against it when it is
// opened, as always); what changes is that from now on only the key's
// holder can write one. A slot that does not decode as an unkeyed record
// (torn, empty, already keyed) is kept as it is. The new seal replaces the
// old one whole (written, synced, renamed, the directory synced), with its
// owner and mode, so a crash leaves the old seal or the new one. It says
// whether it rewrote anything; a seal that is missing or not a regular
// file is left for fsck and the log's open to name.
func Rekey(at Place) (bool, error) {
	f, err := at.Root.OpenFile(at.Seal, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) || storefs.IsUnsafe(err) {
		return false, nil
	}
	if err != nil {
		return false, osError("migrate seal", at.Root.Show(at.Seal), err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false, osError("migrate seal", at.Root.Show(at.Seal), err)
	}
	b := make([]byte, sealSize)
	n, _ := f.ReadAt(b, 0)
	changed := false
	for i := 0; (i+1)*slotSize <= n; i++ {
		slot := b[i*slotSize : (i+1)*slotSize]
		if string(slot[:8]) != unkeyedMagic {
			continue
		}
		if r, err := decodeUnkeyed(slot); err == nil {
			copy(slot, r.encode(at.Key))
			changed = true
		}
	}
	if !changed {
		return false, nil
	}
	own := storefs.Owner{Uid: int(st.Uid), Gid: int(st.Gid), FileMode: os.FileMode(st.Mode & 0o777)}
	if err := at.Root.ReplaceFile(at.Seal, b[:n], own, storefs.SyncAll); err != nil {
		return false, osError("migrate seal", at.Root.Show(at.Seal), err)
	}
	return true, nil
}
