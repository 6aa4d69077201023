package sealedlog

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// The fence: which writer hosts' batches are history (SPEC 19). Hosts that
// share a store elect one writer at a time through a lease; each writer's
// fencing token is larger than every earlier writer's, and every batch it
// writes carries it (journal_format.go). A writer that takes over first
// fences the journal (FenceJournal): it records, durably, its token and,
// for each journal file there at that moment, where that file's last
// valid batch ends. A writer that lost its lease may still be running (cut
// off, paused) and go on writing: its later batches are not history.
//
// The rule, for a batch of token t in file F ending at byte e: it counts
// unless some epoch of the fence (one per takeover) has a token above t
// and does not name F, or names F with an end below e. So a stale
// writer's batches count up to where its files stood when it was fenced,
// and nothing it wrote afterwards counts, in its old files or in files it
// made later; a writer's own batches (its token is the newest) always
// count. Replay, checkpoints and fsck pass such batches over, saying so
// (Recovery.Ignored, JournalPlan.Notes), never as damage; their intent
// records are still honoured, so that the log bytes a stale writer wrote
// past what counted are cut back by the next replay.
//
// The file ("<dir>/fence", root's, 0600) is text, so that an administrator
// can read it:
//
//	ctxfs journal fence 1
//	epoch <token>
//	file <gen, 16 hex> <end>
//	…
//	crc32c <8 hex>    (CRC-32C of everything before this line)
//
// It is replaced whole (a new file, synced, renamed over, its directory
// synced: storefs.ReplaceFile, which needs no renameat2 flags).
const (
	fenceName   = "fence"
	fenceHeader = "ctxfs journal fence 1"
	maxFence    = 1 << 20
)

// fence is a decoded fence file: its epochs, oldest first.
type fence struct{ epochs []fenceEpoch }

// fenceEpoch is one takeover: the token of the writer that took over, and
// where each journal file there then ended (by generation).
type fenceEpoch struct {
	token uint64
	ends  map[uint64]int64
}

// token is the newest writer's token (0: no fence).
func (fc *fence) token() uint64 {
	if fc == nil || len(fc.epochs) == 0 {
		return 0
	}
	return fc.epochs[len(fc.epochs)-1].token
}

// counts says whether a batch of token in generation gen ending at end is
// history.
func (fc *fence) counts(token, gen uint64, end int64) bool {
	if fc == nil {
		return true
	}
	for _, e := range fc.epochs {
		if e.token <= token {
			continue
		}
		if n, ok := e.ends[gen]; !ok || end > n {
			return false
		}
	}
	return true
}

// FencePath is the fence's path below the store, for dir the journal's
// directory.
func FencePath(dir string) string { return path.Join(dir, fenceName) }

// readFence reads dir's fence (nil when there is none).
func readFence(root *storefs.Root, dir string) (*fence, error) {
	rel := FencePath(dir)
	b, err := root.ReadFile(rel, maxFence)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, osError("fence", root.Show(rel), err)
	}
	fc, err := parseFence(b)
	if err != nil {
		return nil, &abi.Error{Op: "fence", Path: root.Show(rel), Errno: syscall.EIO, Msg: err.Error() + " (the fence is the server's own file: restore it from a backup, or remove it once no host of the cluster writes the store)"}
	}
	return fc, nil
}

// parseFence decodes a fence file's text, checking its CRC and every line.
func parseFence(b []byte) (*fence, error) {
	text := string(b)
	i := strings.LastIndex(strings.TrimSuffix(text, "\n"), "\n")
	if i < 0 || !strings.HasSuffix(text, "\n") {
		return nil, errors.New("not a fence file")
	}
	body, last := text[:i+1], strings.TrimSuffix(text[i+1:], "\n")
	sum, ok := strings.CutPrefix(last, "crc32c ")
	if crc, err := strconv.ParseUint(sum, 16, 32); !ok || err != nil || uint32(crc) != crc32.Checksum([]byte(body), castagnoli) {
		return nil, errors.New("its checksum does not hold")
	}
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	if lines[0] != fenceHeader {
		return nil, errors.New("not a fence file of this ctxfs")
	}
	fc := &fence{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "epoch":
			t, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil || t < fc.token() {
				return nil, fmt.Errorf("bad epoch line %q", line)
			}
			fc.epochs = append(fc.epochs, fenceEpoch{token: t, ends: map[uint64]int64{}})
		case len(f) == 3 && f[0] == "file" && len(fc.epochs) > 0:
			g, gerr := strconv.ParseUint(f[1], 16, 64)
			n, nerr := strconv.ParseInt(f[2], 10, 64)
			if gerr != nil || nerr != nil || n < 0 {
				return nil, fmt.Errorf("bad file line %q", line)
			}
			fc.epochs[len(fc.epochs)-1].ends[g] = n
		default:
			return nil, fmt.Errorf("bad line %q", line)
		}
	}
	return fc, nil
}

// encode is the fence file's text.
func (fc *fence) encode() []byte {
	var b strings.Builder
	b.WriteString(fenceHeader + "\n")
	for _, e := range fc.epochs {
		fmt.Fprintf(&b, "epoch %d\n", e.token)
		gens := make([]uint64, 0, len(e.ends))
		for g := range e.ends {
			gens = append(gens, g)
		}
		slices.Sort(gens)
		for _, g := range gens {
			fmt.Fprintf(&b, "file %016x %d\n", g, e.ends[g])
		}
	}
	fmt.Fprintf(&b, "crc32c %08x\n", crc32.Checksum([]byte(b.String()), castagnoli))
	return []byte(b.String())
}

// staleToken says a writer's token is below the fence's: another host
// took the store over after it (ESTALE).
func staleToken(root *storefs.Root, dir string, token, fenced uint64) error {
	return abi.Errorf(syscall.ESTALE, "fence", "%s: this host's writer token %d is older than the fence's %d: another host writes the store now", root.Show(FencePath(dir)), token, fenced)
}

// FenceJournal fences the journal in dir for the writer of token (> 0),
// before it replays: it records, durably, the token and where each
// journal file's last valid batch ends now, so that nothing a writer of a
// lower token writes from now on is history. A token below the fence's
// is refused with ESTALE and nothing is written; the same token again (a
// writer that starts again under its lease) adds an epoch that changes
// nothing of what counts. OpenJournal calls it when its config has a
// token.
func FenceJournal(root *storefs.Root, dir string, token uint64) error {
	if token == 0 {
		return abi.Errorf(syscall.EINVAL, "fence", "a fence needs a writer token above 0")
	}
	fc, err := readFence(root, dir)
	if err != nil {
		return err
	}
	if fc == nil {
		fc = &fence{}
	}
	if token < fc.token() {
		return staleToken(root, dir, token, fc.token())
	}
	gens, err := journalGens(root, dir)
	if err != nil {
		return osError("fence", root.Show(dir), err)
	}
	now := fenceEpoch{token: token, ends: map[uint64]int64{}}
	for _, g := range gens {
		end, err := lastBatchEnd(root, path.Join(dir, journalName(g)), g)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a checkpoint removed it meanwhile
		}
		if err != nil {
			return err
		}
		now.ends[g] = end
	}
	fc.epochs = append(fc.pruned(now.ends), now)
	own := storefs.Owner{Uid: os.Geteuid(), Gid: os.Getegid(), DirMode: 0o700, FileMode: 0o600}
	if err := root.ReplaceFile(FencePath(dir), fc.encode(), own, storefs.SyncAll); err != nil {
		return osError("fence", root.Show(FencePath(dir)), err)
	}
	return nil
}

// pruned is the epochs still needed beside a new one naming the files
// that exist (exists): an old epoch's files that are gone are dropped (a
// file of that name made later is not named by the new epoch, which then
// keeps every older token's batches in it out anyway), and an epoch left
// naming no file keeps every batch of a lower token out everywhere, so
// the epochs of a token at or below the highest such one add nothing.
func (fc *fence) pruned(exists map[uint64]int64) []fenceEpoch {
	var out []fenceEpoch
	var emptyTop uint64
	for _, e := range fc.epochs {
		kept := fenceEpoch{token: e.token, ends: map[uint64]int64{}}
		for g, n := range e.ends {
			if _, ok := exists[g]; ok {
				kept.ends[g] = n
			}
		}
		if len(kept.ends) == 0 {
			emptyTop = max(emptyTop, e.token)
		}
		out = append(out, kept)
	}
	keptEmpty := false
	return slices.DeleteFunc(out, func(e fenceEpoch) bool {
		if e.token != emptyTop {
			return e.token < emptyTop
		}
		drop := len(e.ends) > 0 || keptEmpty // one empty epoch of the top token is enough
		keptEmpty = keptEmpty || len(e.ends) == 0
		return drop
	})
}

// lastBatchEnd is where the last valid batch of the journal file rel (of
// generation gen) ends: past it, the file holds zeros, a torn batch, or
// nothing (a stale writer's next batch goes there).
func lastBatchEnd(root *storefs.Root, rel string, gen uint64) (int64, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, osError("fence", root.Show(rel), err)
	}
	var end int64
	for pos, num := int64(0), uint64(0); pos < st.Size(); num++ {
		h, _, ok := readBatch(f, pos, st.Size(), gen, num)
		if !ok {
			next, found := nextBatch(f, pos+journalAlign, st.Size(), gen)
			if !found {
				break
			}
			pos, num = next.pos, next.h.num-1
			continue
		}
		pos += h.size()
		end = pos
	}
	return end, nil
}

// fenceFor is what OpenJournal does about the fence before it replays: a
// writer with a token fences the journal; one without refuses a fenced
// journal, whose replay would pass over every batch it writes.
func fenceFor(root *storefs.Root, dir string, token uint64) error {
	if token > 0 {
		return FenceJournal(root, dir, token)
	}
	fc, err := readFence(root, dir)
	if err != nil || fc == nil {
		return err
	}
	return abi.Errorf(syscall.ESTALE, "journal", "%s: the store's journal is fenced by a cluster (writer token %d); mount it with --cluster, or, once no host of the cluster runs, run ctxfs fsck --repair and remove the fence", root.Show(FencePath(dir)), fc.token())
}
