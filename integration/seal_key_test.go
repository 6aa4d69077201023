package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// The seal's slot layout (session/sealedlog/seal.go), read here as the
// attacker and an older ctxfs see it: two 512-byte slots, each with its
// magic first, the MAC (keyed seals only) at 352..384 and a CRC-32C of
// everything before it in its last 4 bytes.
const (
	sealSlot       = 512
	sealMacStart   = 352
	sealMacEnd     = 384
	sealCRC        = sealSlot - 4
	keyedMagic     = "CTXSEAL3"
	unkeyedMagic   = "CTXSEAL2"
	uid1001CoderAt = "home/1001/agent/coder/session/"
)

// unkeySeal rewrites every keyed record of the seal file p byte for byte
// as a ctxfs before keyed seals wrote it (CTXSEAL2: the same fields, zeros
// where the MAC is, the CRC over the slot). It is how these tests make a
// store of the older code, and the unkeyed seal an attacker would write.
func unkeySeal(t testing.TB, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	testkit.Must(t, err)
	for off := 0; off+sealSlot <= len(b); off += sealSlot {
		slot := b[off : off+sealSlot]
		if string(slot[:8]) != keyedMagic {
			continue
		}
		copy(slot, unkeyedMagic)
		clear(slot[sealMacStart:sealMacEnd])
		binary.LittleEndian.PutUint32(slot[sealCRC:], crc32.Checksum(slot[:sealCRC], crc32.MakeTable(crc32.Castagnoli)))
	}
	testkit.Must(t, os.WriteFile(p, b, 0))
}

// sealFiles lists the seal files of every session of the store.
func sealFiles(t testing.TB, store string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(filepath.Join(store, "home"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && filepath.Base(filepath.Dir(p)) == ".seal" && strings.HasSuffix(p, ".jsonl") {
			out = append(out, p)
		}
		return nil
	})
	if len(out) == 0 {
		t.Fatal("no seal in the store")
	}
	return out
}

// slotMagics is the magic of each slot of a seal file that holds one.
func slotMagics(t testing.TB, p string) []string {
	b, err := os.ReadFile(p)
	testkit.Must(t, err)
	var out []string
	for off := 0; off+sealSlot <= len(b); off += sealSlot {
		if m := string(b[off : off+8]); strings.HasPrefix(m, "CTXSEAL") {
			out = append(out, m)
		}
	}
	return out
}

// forgeHistory rewrites the messages log of the session at dir (a store
// path) as a user who can write their store files would: the log's
// content changed, and a new log and seal made with the sealedlog code
// under the session's own identity and binding, everything right but the
// store's key, which the attacker does not have (they use one of their
// own). It returns the forged content.
func forgeHistory(t testing.TB, dir string) []byte {
	t.Helper()
	log := filepath.Join(dir, "messages.jsonl")
	old, err := os.ReadFile(log)
	testkit.Must(t, err)
	forged := bytes.Replace(old, []byte("hello"), []byte("HELLO"), 1)
	if bytes.Equal(forged, old) {
		t.Fatalf("nothing to forge in %q", old)
	}
	identity, err := os.ReadFile(filepath.Join(dir, ".seal", "identity"))
	testkit.Must(t, err)
	root, err := storefs.Open(dir)
	testkit.Must(t, err)
	defer root.Close()
	secret := make([]byte, 32)
	rand.Read(secret)
	// A sealed log is appended only through a journal: the attacker's own,
	// outside the store, gone with the test.
	jroot, err := storefs.Open(t.TempDir())
	testkit.Must(t, err)
	defer jroot.Close()
	journal, err := sealedlog.OpenJournal(jroot, ".", nil, sealedlog.JournalConfig{})
	testkit.Must(t, err)
	defer journal.Close()
	at := sealedlog.Place{Root: root, Log: "messages.jsonl", Seal: ".seal/messages.jsonl",
		Bind: sealedlog.Binding(identity, "messages.jsonl"), Key: sealedlog.NewKey(secret), Journal: journal}
	testkit.Must(t, os.Remove(log))
	testkit.Must(t, os.Remove(filepath.Join(dir, ".seal", "messages.jsonl")))
	// Owned as the store holds history (root's), so that only the key
	// tells the forgery apart.
	l, err := sealedlog.Create(at, storefs.Owner{Uid: 0, Gid: 1001, FileMode: 0o600})
	testkit.Must(t, err)
	if _, err := l.Append(forged); err != nil {
		t.Fatal(err)
	}
	testkit.Must(t, l.Close())
	return forged
}

// TestSealKeyForgedHistory: issue 19, finding 4. A user's history
// rewritten in the store with a seal recomputed for it (keyed with a key
// of the attacker's, or in the unkeyed format of an older ctxfs) is
// unprovable after a restart: a send is EIO and writes nothing, reading
// through the mount still works, and fsck exits 1 naming the seal.
func TestSealKeyForgedHistory(t *testing.T) {
	requireFUSE(t)
	for _, unkeyed := range []bool{false, true} {
		name := "another-key"
		if unkeyed {
			name = "unkeyed"
		}
		t.Run(name, func(t *testing.T) {
			s := newFuseServer(t)
			s.sendAs(uid1001, "a", "a1", "", "hello")
			s.sendAs(uid1001, "a", "a2", "", "again")
			s.kill(s.cmd, syscall.SIGTERM)
			dir := filepath.Join(s.store, uid1001CoderAt, "a")
			seal := filepath.Join(dir, ".seal", "messages.jsonl")
			forged := forgeHistory(t, dir)
			if unkeyed {
				unkeySeal(t, seal)
			}
			s.start()

			before := testkit.Snapshot(t, dir, nil)
			frames, raw, err := s.requestAs(uid1001, "coder", `{"op":"send","id":"a3","session":"a","input":"more"}`)
			if err != nil {
				t.Fatalf("send: %v\n%s", err, raw)
			}
			wantEIOFrames(t, "a send to a session whose history was forged", frames)
			out, err := bashAs(t, uid1001, `printf '%s\n' '{"role":"user","content":"by hand"}' >> `+s.mnt(uid1001CoderAt+"a/messages.jsonl"))
			if err == nil || !strings.Contains(out, "Input/output error") {
				t.Errorf("an append through the mount to the forged log: %v %s, want EIO", err, out)
			}
			settle()
			unchanged(t, "a send and an append to a forged session", before, testkit.Snapshot(t, dir, nil))

			got, err := runCmd(t, uid1001, nil, "cat", s.mnt(uid1001CoderAt+"a/messages.jsonl"))
			if err != nil || got != string(forged) {
				t.Errorf("reading the forged log through the mount: %v\n%q, want\n%q", err, got, forged)
			}
			out, code := s.fsck()
			if code != 1 || fsckLine(out, seal+": ", "seal does not verify (forged, or from another store)") == "" {
				t.Errorf("fsck: exit %d, want 1 and a line naming %s as forged:\n%s", code, seal, out)
			}
		})
	}
}

// TestSealKeyMigration: a store whose seals an older ctxfs wrote (no key,
// unkeyed records) is checked clean by fsck as it is, mounts, serves its
// sessions (sends append to them), and afterwards every seal is keyed,
// the key is root's 0600 in the server's own directory, and fsck is clean.
// So is a store whose migration a crash interrupted (its key still under
// the migrating name, some seals keyed and some not), and one that
// `fsck --repair` migrates before any mount.
func TestSealKeyMigration(t *testing.T) {
	requireFUSE(t)
	for _, how := range []string{"older-store", "interrupted", "fsck-repair"} {
		t.Run(how, func(t *testing.T) { testSealKeyMigration(t, how) })
	}
}

func testSealKeyMigration(t *testing.T, how string) {
	interrupted := how == "interrupted"
	s := newFuseServer(t)
	s.sendAs(uid1001, "a", "a1", "", "hello")
	s.sendAs(uid1001, "b", "b1", "", "hello b")
	s.send("c", "c1", "hello c")
	s.kill(s.cmd, syscall.SIGTERM)

	key := filepath.Join(s.store, ".ctxfs", "seal.key")
	if interrupted {
		testkit.Must(t, os.Rename(key, key+".migrating"))
	} else {
		testkit.Must(t, os.Remove(key))
	}
	for i, p := range sealFiles(t, s.store) {
		if interrupted && i%2 == 0 {
			continue // already rekeyed when the crash came
		}
		unkeySeal(t, p)
		for _, m := range slotMagics(t, p) {
			if m != unkeyedMagic {
				t.Fatalf("%s: slot %s after unkeying", p, m)
			}
		}
	}
	if out, code := s.fsck(); code != 0 {
		t.Fatalf("fsck of the store before its migration: exit %d\n%s", code, out)
	}
	if how == "fsck-repair" {
		out, code := s.fsck("--repair")
		if code != 0 || !strings.Contains(out, "seals of an older ctxfs keyed with the store's seal key") {
			t.Fatalf("fsck --repair of the store of an older ctxfs: exit %d\n%s", code, out)
		}
	}

	s.start()
	s.sendAs(uid1001, "a", "a2", "", "again")
	s.send("c", "c2", "again c")
	if got := s.readMnt(sessRel("c") + "/messages.jsonl"); !strings.Contains(got, "again c") {
		t.Errorf("session c after the migration: %q", got)
	}
	for _, p := range sealFiles(t, s.store) {
		for _, m := range slotMagics(t, p) {
			if m != keyedMagic {
				t.Errorf("%s: a %s slot after the migration", p, m)
			}
		}
	}
	st, err := os.Stat(key)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != 32 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the seal key after the migration: %v, %v; want 32 bytes, root's, 0600", st, err)
	}
	if _, err := os.Stat(key + ".migrating"); err == nil {
		t.Errorf("the migrating key is still there")
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck after the migration: exit %d\n%s", code, out)
	}
	s.kill(s.cmd, syscall.SIGTERM)
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck after the migrated server stopped: exit %d\n%s", code, out)
	}
}
