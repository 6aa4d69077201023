package sealedlog

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// forgedHistory is what a user who can write their log and seal makes of
// them: a new history, and a seal computed for it with the sealedlog code,
// everything right but the store's key (seal writes the seal file).
var forgedHistory = append(line(0), []byte(`{"role":"user","content":"I never said that"}`+"\n")...)

func forgedRecord() *record {
	h := newHash()
	h.Write(forgedHistory)
	return newRecord(7, int64(len(forgedHistory)), true, h, testBind)
}

// TestForgedSealRefused: a log rewritten with a seal recomputed under
// another key, or in the unkeyed format of an older ctxfs, is unprovable:
// Open's log refuses appends with EIO and writes nothing, Verify and
// Repair name the seal as forged, reads still work.
func TestForgedSealRefused(t *testing.T) {
	attackerKey := NewKey(bytes.Repeat([]byte{9}, keySize))
	for name, seal := range map[string][]byte{
		"another key": forgedRecord().encode(attackerKey),
		"unkeyed":     encodeUnkeyed(forgedRecord()),
	} {
		t.Run(name, func(t *testing.T) {
			l, p, s := threeLines(t)
			l.Close()
			if err := os.WriteFile(p, forgedHistory, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s, append(seal, make([]byte, slotSize)...), 0o600); err != nil {
				t.Fatal(err)
			}
			before := snap(t, p, s)
			ps := Verify(at(t, p, s))
			if len(ps) != 1 || ps[0].Path != s || !strings.Contains(ps[0].What, "seal does not verify (forged, or from another store)") || ps[0].Repairable {
				t.Fatalf("verify: %s", whats(ps))
			}
			_, err := Repair(at(t, p, s))
			testkit.WantErrno(t, "Repair", err, syscall.EIO, "forged")
			l, err = Open(at(t, p, s))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			_, err = l.Append(line(5))
			testkit.WantErrno(t, "Append", err, syscall.EIO, "forged")
			if got := readAll(t, l); !bytes.Equal(got, forgedHistory) {
				t.Fatalf("read %q, want the log as it is", got)
			}
			l.Close()
			if !snap(t, p, s).same(before) {
				t.Fatal("a refused log or seal was written")
			}
		})
	}
}

// TestForgedSlotBesideGoodOne: a forged record in one slot makes the seal
// unprovable even when the other slot, the server's own, still vouches
// for the log: someone else wrote the seal.
func TestForgedSlotBesideGoodOne(t *testing.T) {
	l, p, s := threeLines(t)
	l.Close()
	h := newHash()
	h.Write(readFile(t, p))
	r := newRecord(99, int64(len(readFile(t, p))), true, h, testBind)
	writeAt(t, s, r.encode(NewKey(bytes.Repeat([]byte{1}, keySize))), int64(r.seq%2)*slotSize)
	ps := Verify(at(t, p, s))
	if len(ps) != 1 || !strings.Contains(ps[0].What, "forged") {
		t.Fatalf("verify: %s", whats(ps))
	}
}

// TestTornSlotIsNotForged: a slot whose CRC fails (a crash during its
// write) is torn, not forged: the other slot vouches for the log.
func TestTornSlotIsNotForged(t *testing.T) {
	l, p, s := threeLines(t)
	l.Close()
	st, _ := readSealFile(t, s)
	writeAt(t, s, []byte("torn"), int64((st.latest.seq+1)%2)*slotSize+100)
	if ps := Verify(at(t, p, s)); len(ps) != 0 {
		t.Fatalf("verify: %s", whats(ps))
	}
}

func readSealFile(t *testing.T, s string) (*sealState, error) {
	t.Helper()
	f, err := os.Open(s)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return readSeal(f, testKey)
}

// storeRoot is a store of its own for the key's files.
func storeRoot(t *testing.T) (*storefs.Root, string) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o700); err != nil {
		t.Fatal(err)
	}
	r, err := storefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, dir
}

// TestOpenKey: a store without a key gets one, 32 bytes, 0600, first as
// the migrating key; opened again it is the same key; Migrated makes it
// the key; a key file of the wrong size is EIO; ReadKey never creates.
func TestOpenKey(t *testing.T) {
	r, dir := storeRoot(t)
	k, err := ReadKey(r, "state")
	if err != nil || k.secret != nil || !k.Migrating() {
		t.Fatalf("ReadKey of a store without a key: %+v, %v", k, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "state")); len(ents) != 0 {
		t.Fatalf("ReadKey created %v", ents)
	}
	k, err = OpenKey(r, "state")
	if err != nil || !k.Migrating() {
		t.Fatalf("OpenKey: %+v, %v", k, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "state", MigratingKeyFile))
	if err != nil || fi.Size() != keySize || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the new key file: %v, %v", fi, err)
	}
	again, err := OpenKey(r, "state")
	if err != nil || !bytes.Equal(again.secret, k.secret) || !again.Migrating() {
		t.Fatalf("OpenKey again: %+v, %v", again, err)
	}
	if err := k.Migrated(r, "state"); err != nil || k.Migrating() {
		t.Fatalf("Migrated: %v", err)
	}
	done, err := ReadKey(r, "state")
	if err != nil || !bytes.Equal(done.secret, k.secret) || done.Migrating() {
		t.Fatalf("ReadKey after the migration: %+v, %v", done, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "state")); len(ents) != 1 || ents[0].Name() != KeyFile {
		t.Fatalf("the state directory holds %v, want %s alone", ents, KeyFile)
	}
	os.WriteFile(filepath.Join(dir, "state", KeyFile), []byte("short"), 0o600)
	_, err = OpenKey(r, "state")
	testkit.WantErrno(t, "OpenKey", err, syscall.EIO, "5 bytes, want 32")
}

// TestRekey: a seal of an older ctxfs (both slots unkeyed) is accepted
// while the store migrates, is rewritten keyed by Rekey (same records,
// same owner and mode), and verifies after the migration; before Rekey, a
// migrated key refuses it as forged.
func TestRekey(t *testing.T) {
	l, p, s := threeLines(t)
	l.Close()
	old := readFile(t, s)
	unkeySeal(t, s)
	os.Chmod(s, 0o640)
	if ps := Verify(at(t, p, s)); len(ps) != 1 || !strings.Contains(ps[0].What, "forged") {
		t.Fatalf("an unkeyed seal under a migrated key: %s", whats(ps))
	}
	place := at(t, p, s)
	place.Key = migratingKey
	if ps := Verify(place); len(ps) != 0 {
		t.Fatalf("an unkeyed seal while the store migrates: %s", whats(ps))
	}
	if changed, err := Rekey(place); err != nil || !changed {
		t.Fatalf("Rekey: %v, %v", changed, err)
	}
	if got := readFile(t, s); !bytes.Equal(got, old) {
		t.Fatalf("the rekeyed seal differs from the one the server wrote keyed")
	}
	if fi, _ := os.Stat(s); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v after Rekey, want 0640 kept", fi.Mode())
	}
	if ps := Verify(at(t, p, s)); len(ps) != 0 {
		t.Fatalf("after the migration: %s", whats(ps))
	}
	if changed, err := Rekey(place); err != nil || changed {
		t.Fatalf("Rekey of a keyed seal: %v, %v, want nothing done", changed, err)
	}
}

// unkeySeal rewrites the seal file s as a ctxfs before keyed seals would
// have written it: each slot's record unkeyed (an empty slot stays so).
func unkeySeal(t *testing.T, s string) {
	t.Helper()
	b := readFile(t, s)
	n := 0
	for i := 0; i < 2; i++ {
		if rec, err := decodeRecord(b[i*slotSize:(i+1)*slotSize], testKey); err == nil {
			copy(b[i*slotSize:], encodeUnkeyed(rec))
			n++
		}
	}
	if n == 0 {
		t.Fatalf("%s holds no record", s)
	}
	if err := os.WriteFile(s, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// migratingKey is testKey while the store is being migrated.
var migratingKey = &Key{secret: testKey.secret, unkeyed: true}

// TestRekeyThenReplay: a journal an older server left behind (killed
// before any checkpoint, its seals unkeyed) replays after the migration
// rekeyed the seals, as it would have under the older server. The order
// matters: under the migrated key alone the unkeyed seals are forged, so
// replay sets their records aside (each log untouched and unprovable,
// the rest of the store served) rather than build on them.
func TestRekeyThenReplay(t *testing.T) {
	crashedUnkeyed := func() *jstore {
		js := newJStore(t, 2, JournalConfig{CheckpointEvery: -1})
		for n := 0; n < 10; n++ {
			js.appendDurable(n%2, n)
		}
		js.crash()
		for i := range js.logs {
			unkeySeal(t, filepath.Join(js.dir, js.place(i).Seal))
		}
		return js
	}

	js := crashedUnkeyed()
	logsAndSeals := func() map[string]string {
		out := map[string]string{}
		for i := range js.logs {
			for _, rel := range []string{js.place(i).Log, js.place(i).Seal} {
				b, _ := os.ReadFile(filepath.Join(js.dir, rel))
				out[rel] = string(b)
			}
		}
		return out
	}
	logs := logsAndSeals()
	rec, err := RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) > 0 || len(rec.Held) != 2 || !strings.Contains(whats(rec.Held), "no valid record") {
		t.Fatalf("replay onto unkeyed seals under the migrated key: %v problems %s held %s", err, whats(rec.Problems), whats(rec.Held))
	}
	if after := logsAndSeals(); !maps.Equal(after, logs) {
		t.Fatal("replay onto forged seals changed a log or a seal")
	}

	js = crashedUnkeyed()
	for i := range js.logs {
		at := js.place(i)
		at.Key = migratingKey
		if changed, err := Rekey(at); err != nil || !changed {
			t.Fatalf("Rekey log %d: %v %v", i, changed, err)
		}
	}
	rec, err = RecoverJournal(js.root, jdir, js.locate, false)
	if err != nil || len(rec.Problems) > 0 || len(rec.Held) > 0 || rec.Logs != 2 {
		t.Fatalf("replay after the migration: %v %s held %s (%d logs)", err, whats(rec.Problems), whats(rec.Held), rec.Logs)
	}
	js.verify()
}

// TestKeyMoveCutByCrash: where the store moves files by link then unlink
// (storefs.Move without RENAME_NOREPLACE), a crash between the two leaves
// a key under two names: the temporary beside the migrating key, or the
// migrating key beside the key. OpenKey finishes those moves (the old
// names go), reads the key the move committed, and leaves its bytes as
// they were.
func TestKeyMoveCutByCrash(t *testing.T) {
	t.Setenv(storefs.PortableEnv, "all")
	r, dir := storeRoot(t)
	state := filepath.Join(dir, "state")
	k, err := OpenKey(r, "state")
	testkit.Must(t, err)
	testkit.Must(t, os.Link(filepath.Join(state, MigratingKeyFile), filepath.Join(state, MigratingKeyFile+".tmp")))
	again, err := OpenKey(r, "state")
	if err != nil || !bytes.Equal(again.secret, k.secret) || !again.Migrating() {
		t.Fatalf("OpenKey after a cut key write: %+v, %v", again, err)
	}
	wantNames(t, state, MigratingKeyFile)
	testkit.Must(t, os.Link(filepath.Join(state, MigratingKeyFile), filepath.Join(state, KeyFile)))
	done, err := OpenKey(r, "state")
	if err != nil || !bytes.Equal(done.secret, k.secret) || done.Migrating() {
		t.Fatalf("OpenKey after a cut migration: %+v, %v", done, err)
	}
	wantNames(t, state, KeyFile)
}

// wantNames fails the test unless dir holds exactly names.
func wantNames(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Fatalf("%s holds %v, want %v", dir, got, names)
	}
}

// TestMissingKeyNamed: a store whose key file is gone (ReadKey finds
// none, as fsck of it does) cannot check its keyed seals, and Verify says
// so, naming the key, rather than calling each seal forged by someone
// else; Open's log refuses appends with EIO all the same.
func TestMissingKeyNamed(t *testing.T) {
	l, p, s := threeLines(t)
	l.Close()
	root, err := storefs.Open(t.TempDir())
	testkit.Must(t, err)
	defer root.Close()
	none, err := ReadKey(root, ".")
	testkit.Must(t, err)
	place := at(t, p, s)
	place.Key = none
	before := snap(t, p, s)
	ps := Verify(place)
	if len(ps) != 1 || ps[0].Path != s || !strings.Contains(ps[0].What, "the store has no "+KeyFile+" to check it with") || ps[0].Repairable {
		t.Fatalf("verify without the key: %s", whats(ps))
	}
	l, err = Open(place)
	testkit.Must(t, err)
	defer l.Close()
	_, err = l.Append(line(5))
	testkit.WantErrno(t, "Append", err, syscall.EIO, KeyFile)
	l.Close()
	if !snap(t, p, s).same(before) {
		t.Fatal("a log whose key is missing was written")
	}
}
