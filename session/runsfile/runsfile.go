// Package runsfile owns the runs file (<store>/.ctxfs/running): the runs
// under way, so that the next start finds the sessions whose runs a
// crash interrupted, and the dormant runs waiting for a person, without
// scanning every session.
//
// It is bookkeeping, never history: the sessions' logs say what happened
// to each run. It must never decide what becomes of a run it lists (the
// engine closes or resumes it when it loads the session), never read a
// session, and never import the engine, fs, server or cmd.
package runsfile

import (
	"bufio"
	"os"
	"strings"
	"sync"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
)

// File lets the next start find the runs a crash interrupted without
// scanning every session: one line when a run starts ("+<run> <session
// path>") and one when it ends ("-<run>"), appended to
// <store>/.ctxfs/running. It is bookkeeping, never history, so it is not
// synced: a run whose line a power loss drops is still closed when its
// session is next loaded (a start without done), only later.
//
// A line is written before Start or End returns, as one write with every
// line given meanwhile: all runs share the file, and on a store on a
// distributed filesystem each write is a round trip through its client
// (docs/benchmarks.md#appends-to-other-logs-write-at-once-the-runs-file-written-in-turns).
//
// The zero File keeps the lines of dormant runs (Keep) until Create makes
// the file; a nil File writes nothing.
type File struct {
	mu    sync.Mutex
	f     *os.File
	store *storefs.Root // where f is, for its rewrite (compact)
	kept  []string      // lines of dormant runs found before the file was made
	// open is the line of each run started (or kept) and not ended, with
	// live their bytes, and size the bytes the file holds: what a
	// rewrite keeps, and when it is due (compact).
	open       map[string]string
	live, size int

	// Lines given while a write is in flight wait in pending for the next
	// write. next is the number of the last write begun, written of the
	// last one done: a write is in flight while they differ.
	pending, spare []byte
	next, written  uint64
	turn           *sync.Cond // a write ended
}

// Rel is the runs file's place in the store.
const Rel = layout.StateDir + "/running"

// Start notes that run began in the session at rel (store-relative).
func (j *File) Start(run, rel string) { j.write(run, "+"+run+" "+rel+"\n") }

// End notes that run ended (or will never resume).
func (j *File) End(run string) { j.write(run, "-"+run+"\n") }

// note keeps what line (of run) does to the runs open. Caller holds j.mu.
func (j *File) note(run, line string) {
	if old, ok := j.open[run]; ok {
		j.live -= len(old)
		delete(j.open, run)
	}
	if strings.HasPrefix(line, "+") {
		if j.open == nil {
			j.open = map[string]string{}
		}
		j.open[run] = line
		j.live += len(line)
	}
}

// compactFloor is the size under which the runs file is never rewritten;
// past it, it is rewritten once it holds four times the lines of the runs
// still open. Each run adds its two lines (a few hundred bytes) for as
// long as the server lives, so a user's sends, each given back by a
// delete or refused after its start, grew root's store without a bound.
const compactFloor = 64 << 10

// compact rewrites the runs file with the lines of the runs still open
// when it has grown past them (compactFloor), under a new name synced and
// renamed over it: a crash leaves the old file or the new one, and either
// names every run open (a dormant run's must survive a reboot). A rewrite
// that fails leaves the old file, still appended to. Caller holds j.mu,
// with no write in flight.
func (j *File) compact() {
	if j.f == nil || j.store == nil || j.size < compactFloor || j.size < 4*j.live {
		return
	}
	const tmp = Rel + ".new"
	f, err := j.store.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	var b strings.Builder
	for _, line := range j.open {
		b.WriteString(line)
	}
	if _, err = f.WriteString(b.String()); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = j.store.Rename(tmp, Rel, 0)
	}
	if err != nil {
		f.Close()
		j.store.Remove(tmp)
		return
	}
	j.store.SyncDir(layout.StateDir)
	j.f.Close()
	j.f, j.size = f, b.Len()
}

// write returns once line is written: by this caller, with the lines
// pending, when no write is in flight; else by whoever writes next.
func (j *File) write(run, line string) {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.turn == nil {
		j.turn = sync.NewCond(&j.mu)
	}
	j.note(run, line)
	j.pending = append(j.pending, line...)
	mine := j.next + 1 // the write that takes pending
	for j.written < mine {
		if j.writing() {
			j.turn.Wait()
			continue
		}
		j.flush()
	}
}

// writing: a write is in flight. Caller holds j.mu.
func (j *File) writing() bool { return j.next != j.written }

// flush writes the pending lines as the next write. Caller holds j.mu
// (released while it writes), and no write is in flight.
func (j *File) flush() {
	buf, f := j.pending, j.f
	j.pending = j.spare[:0]
	j.next++
	j.mu.Unlock()
	if f != nil {
		f.Write(buf)
	}
	j.mu.Lock()
	j.spare, j.written = buf[:0], j.next
	j.size += len(buf)
	j.compact()
	j.turn.Broadcast()
}

// Close closes the file, if it was made.
func (j *File) Close() error {
	if j == nil || j.f == nil {
		return nil
	}
	return j.f.Close()
}

// Abandon closes the file and writes nothing more to it (a writer host
// that lost its lease: the store is another host's now).
func (j *File) Abandon() {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.writing() {
		j.turn.Wait() // nothing is written after Abandon returns
	}
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
}

// Keep carries a dormant run (session/run_resume.go) into the new runs
// file, so that the start after next finds it too.
func (j *File) Keep(run, rel string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	line := "+" + run + " " + rel + "\n"
	j.note(run, line)
	if j.f == nil {
		j.kept = append(j.kept, line)
		return
	}
	j.f.WriteString(line)
	j.size += len(line)
}

// Sync makes the file durable: when a run begins to wait for a person, a
// reboot must find it (its request is durable in its session already).
func (j *File) Sync() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		j.f.Sync()
	}
}

// Create starts a new runs file in the store (the last one's lines are
// read first: Interrupted), holding the lines Keep kept until now.
func (j *File) Create(store *storefs.Root) error {
	f, err := store.OpenFile(Rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.f, j.store = f, store
	for _, line := range j.kept {
		f.WriteString(line)
		j.size += len(line)
	}
	j.kept = nil
	return nil
}

// Interrupted reads the runs file the previous server left: the sessions
// (store-relative) of runs started and never ended.
func Interrupted(store *storefs.Root) []string {
	f, err := store.OpenFile(Rel, os.O_RDONLY, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	open := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "+"):
			if id, rel, ok := strings.Cut(line[1:], " "); ok {
				open[id] = rel
			}
		case strings.HasPrefix(line, "-"):
			delete(open, line[1:])
		}
	}
	seen := map[string]bool{}
	var rels []string
	for _, rel := range open {
		if !seen[rel] {
			seen[rel] = true
			rels = append(rels, rel)
		}
	}
	return rels
}
