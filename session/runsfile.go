package session

import (
	"bufio"
	"os"
	"strings"
	"sync"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
)

// runsFile lets the next start find the runs a crash interrupted without
// scanning every session: one line when a run starts ("+<run> <session
// path>") and one when it ends ("-<run>"), appended to
// <store>/.ctxfs/running. It is bookkeeping, never history, so it is not
// synced: a run whose line a power loss drops is still closed when its
// session is next loaded (a start without done), only later.
type runsFile struct {
	mu   sync.Mutex
	f    *os.File
	kept []string // lines of dormant runs found before the file was made
}

// runningRel is the runs file's place in the store.
const runningRel = layout.StateDir + "/running"

func (j *runsFile) write(line string) {
	if j == nil {
		return
	}
	j.mu.Lock()
	if j.f != nil {
		j.f.WriteString(line)
	}
	j.mu.Unlock()
}

func (j *runsFile) close() error { return j.f.Close() }

// keep carries a dormant run (run_resume.go) into the new runs file, so
// that the start after next finds it too.
func (j *runsFile) keep(run, rel string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	line := "+" + run + " " + rel + "\n"
	if j.f == nil {
		j.kept = append(j.kept, line)
		return
	}
	j.f.WriteString(line)
}

// sync makes the file durable: when a run begins to wait for a person, a
// reboot must find it (its request is durable in its session already).
func (j *runsFile) sync() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		j.f.Sync()
	}
}

func (e *Engine) markRunning(rn *run) {
	if rn.s.rel != "" {
		e.running.write("+" + rn.id + " " + rn.s.ref.Rel() + "\n")
	}
}

func (e *Engine) forgetRun(rn *run) {
	e.mu.Lock()
	delete(e.runs, rn.id)
	e.mu.Unlock()
	e.limits.Runs.Give(rn.caller)
	if rn.s.rel != "" {
		e.running.write("-" + rn.id + "\n")
	}
}

// closeInterrupted loads every session that had a run in progress when the
// previous server stopped (loading closes such runs: closeInterruptedRun),
// then starts a new runs file.
func (e *Engine) closeInterrupted() error {
	e.running = &runsFile{} // made below; until then it keeps lines (keep)
	for _, rel := range e.interruptedSessions() {
		if ct, name, ok := layout.ParseContainerRel(rel); ok && abi.ValidSessionName(name) {
			if _, release, err := e.lookup(layout.Ref{Container: ct, Name: name}); err == nil {
				release()
			}
		}
	}
	f, err := e.admin.OpenFile(runningRel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	e.running.mu.Lock()
	e.running.f = f
	for _, line := range e.running.kept {
		f.WriteString(line)
	}
	e.running.kept = nil
	e.running.mu.Unlock()
	return nil
}

// interruptedSessions reads the runs file: the sessions of runs started and
// never ended.
func (e *Engine) interruptedSessions() []string {
	f, err := e.admin.OpenFile(runningRel, os.O_RDONLY, 0)
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
