package integration

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/mountlife"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// Crash tests of the store-wide write-ahead journal (SPEC 6, issue 10):
// kill -9 at random instants during concurrent sends and appends through
// the mount (checkpoints running all the time), then fsck clean, no torn
// line, every acknowledged start and every fsynced append present exactly
// once, before and after the replay of the next start; a damaged journal
// batch is detected, refuses the start, and is repaired by fsck --repair;
// a bad last batch is a torn tail, not damage.

const (
	journalRounds = 16 // kills in TestJournalKill9 (about 1 s each on a 2-core machine)
	// The journal's layout (session/sealedlog/journal_format.go), read here
	// independently of the code that writes it.
	jMagic     = "CTXJRNL2"
	jAlign     = 4096
	jHeaderLen = 40
)

// jSessions are the sessions of TestJournalKill9: socket clients send to
// every one, writers append through the mount to some.
var jSessions = []string{"j0", "j1", "j2", "j3"}

// jWriters: the mount writers, each a process of its own (the test process
// must hold no descriptor of the mount when the server dies). "fsync"
// writes a line, then fsyncs (or fdatasyncs) after two lines of three:
// every line written before a successful sync is acknowledged. "close"
// opens, writes one line and closes: a successful close acknowledges it.
var jWriters = []struct{ session, mode string }{
	{"j0", "fsync"},
	{"j1", "fsync"},
	{"j0", "fsync"},
	{"j2", "close"},
}

const journalWriter = `
import json, os, sys
log, wid, mode = sys.argv[1], sys.argv[2], sys.argv[3]
def line(i):
    return (json.dumps({"role": "user", "content": "%s %d" % (wid, i), "writer": wid, "n": i}) + "\n").encode()
def out(*a):
    print(*a, flush=True)
def do(what, i, f, *a):
    # One step of the writer; a failure ends it, saying which step and errno.
    try:
        return f(*a)
    except OSError as e:
        out("end " + what, i, e.errno); sys.exit(0)
def write(fd, i):
    b = line(i)
    n = do("write", i, os.write, fd, b)
    if n != len(b):
        out("short", i, n); sys.exit(0)
    out("W", i)
i = 0
if mode == "fsync":
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    out("ready")
    while True:
        write(fd, i)
        if i % 3 != 2:
            do("sync", i, os.fsync if i % 3 == 0 else os.fdatasync, fd)
            out("S", i)
        i += 1
else:
    out("ready")
    while True:
        fd = do("open", i, os.open, log, os.O_WRONLY | os.O_APPEND)
        write(fd, i)
        do("close", i, os.close, fd)
        out("C", i)
        i += 1
`

// lineRecorder keeps a process's stdout, line by line.
type lineRecorder struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines []string
}

func (r *lineRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf.Write(p)
	for {
		i := bytes.IndexByte(r.buf.Bytes(), '\n')
		if i < 0 {
			break
		}
		r.lines = append(r.lines, string(r.buf.Next(i + 1)[:i]))
	}
	return len(p), nil
}

func (r *lineRecorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// jWriterProc is one running mount writer.
type jWriterProc struct {
	id, session, mode string
	cmd               *exec.Cmd
	out               *lineRecorder
	done              chan struct{}
}

// acked is the highest line number whose write was acknowledged durable
// (-1: none), and the number of lines whose write returned.
func (w *jWriterProc) acked() (durable, written int) {
	durable, written = -1, 0
	for _, l := range w.out.snapshot() {
		var kind string
		var n int
		if _, err := fmt.Sscanf(l, "%s %d", &kind, &n); err != nil {
			continue
		}
		switch kind {
		case "W":
			written = n + 1
		case "S", "C":
			durable = n // a sync covers every earlier write of this descriptor
		}
	}
	return durable, written
}

// jClients are the socket clients' acknowledgements.
type jClients struct {
	mu      sync.Mutex
	started map[string]string // client id → session: the start frame was received
	runOf   map[string]string // client id → run id
	done    map[string]bool   // client id → the done frame was received
}

// runClients starts n socket clients, each sending to its session one
// send after another until stop closes; wait waits for them.
func runClients(s *server, round, n int, stop <-chan struct{}, acks *jClients) (wait func(limit time.Duration)) {
	var wg sync.WaitGroup
	for c := 0; c < n; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			session := jSessions[c%len(jSessions)]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("r%d-c%d-%d", round, c, i)
				frames, _ := s.request("coder", fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":"input %s"}`, id, session, id))
				acks.mu.Lock()
				for _, f := range frames {
					switch f["type"] {
					case "start":
						acks.started[id] = session
						acks.runOf[id], _ = f["run"].(string)
					case "done":
						acks.done[id] = true
					}
				}
				acks.mu.Unlock()
				if len(frames) == 0 {
					time.Sleep(5 * time.Millisecond) // the server is gone: do not spin
				}
			}
		}()
	}
	return func(limit time.Duration) {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(limit):
			s.t.Fatalf("socket clients still running %v after stop", limit)
		}
	}
}

// journalFiles lists the journal files of a store, oldest first.
func journalFiles(t testing.TB, store string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(store, ".ctxfs"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "journal-") && len(e.Name()) == len("journal-")+16 {
			out = append(out, filepath.Join(store, ".ctxfs", e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

// storeLogs lists every session log (messages.jsonl, events.jsonl) of a
// store.
func storeLogs(t testing.TB, store string) []string {
	t.Helper()
	var logs []string
	filepath.WalkDir(filepath.Join(store, "home"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (d.Name() == "messages.jsonl" || d.Name() == "events.jsonl") && filepath.Base(filepath.Dir(p)) != ".seal" {
			logs = append(logs, p)
		}
		return nil
	})
	if len(logs) == 0 {
		t.Fatalf("no session log in %s", store)
	}
	return logs
}

// wholeLines checks that a log holds whole JSON-object lines only, each
// line once, and returns its lines. tornTail allows a torn last line
// (dropped, and said): what a SIGKILL leaves in a log written at the
// instant it landed. The kernel stops a write that spans pages between
// two of them when a fatal signal is pending (generic_perform_write), so
// a kill -9 can leave part of an append's bytes in the page cache; they
// lie past what the journal holds durably, in a log with an intent, and
// fsck takes them for what replay cuts (a crash leftover), so the store
// as fsck reads it and as the next start serves it holds whole lines. Seen
// in about one run of TestJournalKill9 in ten (a torn usage or message
// line at the end of a run's batch in events.jsonl).
func wholeLines(t testing.TB, what, p string, tornTail bool) []map[string]any {
	t.Helper()
	b := fileBytes(t, p)
	if b == "" {
		return nil
	}
	if !strings.HasSuffix(b, "\n") {
		torn := lastLines(b, 1)
		if !tornTail {
			t.Errorf("%s: %s ends in a torn line %q (%d bytes)", what, p, torn, len(b))
		} else {
			t.Logf("%s: %s ends in a torn line %q (%d bytes): left by the kill, cut by replay", what, p, torn, len(b))
		}
		b = b[:strings.LastIndexByte(b, '\n')+1]
	}
	var out []map[string]any
	seen := map[string]int{}
	for i, l := range strings.Split(strings.TrimSuffix(b, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m == nil {
			t.Errorf("%s: %s line %d is not a whole JSON object: %q", what, p, i+1, l)
			continue
		}
		if seen[l]++; seen[l] == 2 {
			t.Errorf("%s: %s holds the line %q twice or more", what, p, l)
		}
		out = append(out, m)
	}
	return out
}

// checkJournalAcks checks every log of the store (whole lines, no line
// twice) and that what was acknowledged is there exactly once: each start
// frame received (by client id, in its session's events.jsonl), each done
// frame received, and each mount line acknowledged durable; a writer's
// lines present form a prefix of what it wrote (a log keeps its order and
// a crash only cuts its end). closed: every start has its done (after a
// restart closed the runs the kill interrupted); before that, right after
// the kill, a log may end in a torn line (wholeLines).
func checkJournalAcks(t *testing.T, what string, s *server, acks *jClients, writers []*jWriterProc, closed bool) (startsFound, linesFound int) {
	t.Helper()
	for _, p := range storeLogs(t, s.store) {
		wholeLines(t, what, p, !closed)
	}
	starts := map[string]map[string]int{} // session → client id → start events
	dones := map[string]map[string]int{}  // session → run → done events
	tags := map[string]map[string][]int{} // session → writer → line numbers, in log order
	for _, name := range jSessions {
		dir := s.sessionDir(0, "coder", name)
		starts[name], dones[name], tags[name] = map[string]int{}, map[string]int{}, map[string][]int{}
		nStart, nDone := 0, 0
		for _, e := range wholeLines(t, what, filepath.Join(dir, "events.jsonl"), !closed) {
			switch e["type"] {
			case "start":
				nStart++
				if id, ok := e["client_id"].(string); ok {
					starts[name][id]++
				}
			case "done":
				nDone++
				if run, ok := e["run"].(string); ok {
					dones[name][run]++
				}
			}
		}
		if closed && nStart != nDone {
			t.Errorf("%s: session %s has %d start events and %d done events", what, name, nStart, nDone)
		}
		for _, m := range wholeLines(t, what, filepath.Join(dir, "messages.jsonl"), !closed) {
			if w, ok := m["writer"].(string); ok {
				n, _ := m["n"].(float64)
				tags[name][w] = append(tags[name][w], int(n))
			}
		}
	}
	acks.mu.Lock()
	defer acks.mu.Unlock()
	for id, session := range acks.started {
		if n := starts[session][id]; n != 1 {
			t.Errorf("%s: send %s got its start frame; %s/events.jsonl holds its start %d times", what, id, session, n)
		}
		startsFound++
	}
	for id := range acks.done {
		session, run := acks.started[id], acks.runOf[id]
		if n := dones[session][run]; n != 1 {
			t.Errorf("%s: send %s (run %s) got its done frame; %s/events.jsonl holds its done %d times", what, id, run, session, n)
		}
	}
	for _, w := range writers {
		durable, written := w.acked()
		got := tags[w.session][w.id]
		for i, n := range got {
			if n != i {
				t.Errorf("%s: writer %s: %s/messages.jsonl holds its lines %v, not a prefix 0, 1, 2… of what it wrote (%d writes returned)", what, w.id, w.session, summarize(got), written)
				break
			}
		}
		if len(got) <= durable {
			t.Errorf("%s: writer %s: line %d was acknowledged durable (by %s), %s/messages.jsonl holds its lines up to %d only",
				what, w.id, durable, map[string]string{"fsync": "fsync/fdatasync", "close": "close"}[w.mode], w.session, len(got)-1)
		}
		linesFound += durable + 1
	}
	return startsFound, linesFound
}

// summarize shortens a list of line numbers for a message.
func summarize(ns []int) string {
	if len(ns) <= 12 {
		return fmt.Sprint(ns)
	}
	return fmt.Sprintf("%v … %v (%d)", ns[:6], ns[len(ns)-6:], len(ns))
}

// lazyUnmount detaches what is left at the mountpoints of a killed server.
func lazyUnmount(s *server) {
	for _, d := range []string{"home", "shared"} {
		if mountsAt(s.mnt(d)) > 0 {
			exec.Command("umount", "-l", s.mnt(d)).Run()
		}
	}
}

// waitDone waits for done, up to limit.
func waitDone(done <-chan struct{}, limit time.Duration) bool {
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}

// TestJournalKill9: rounds of kill -9 of a server with checkpoints every
// few milliseconds, at a random instant while socket clients send to four
// sessions and four writers append through the mount to three of them.
// With the server down, fsck (which reads the journal with the logs) is
// clean and the store's files hold whole lines, each once, with every
// acknowledged start, done and durable line exactly once. The next start
// replays the journal; after a clean stop fsck is still clean, no journal
// file is left, and the same holds.
func TestJournalKill9(t *testing.T) {
	requireFUSE(t)
	began := time.Now()
	s := newServerWith(t, func(s *server) {
		s.env = append(s.env, "CTXFS_CHECKPOINT_BYTES=16384", "CTXFS_CHECKPOINT_EVERY=20ms")
	})
	openToAll(t, s.root)
	keepFusectlAsIs(t)
	umountLeftovers(t, s.root)
	t.Cleanup(func() { // never leave a dead connection behind
		mountlife.AbortDead(s.mnt("home"))
		mountlife.AbortDead(s.mnt("shared"))
	})
	for _, name := range jSessions {
		s.send(name, "setup-"+name, "hello")
	}
	s.kill(s.cmd, syscall.SIGTERM)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)

	kills, duringCheckpoint := 0, 0
	var totalStarts, totalLines int
	for round := 0; round < journalRounds && !t.Failed(); round++ {
		s.start()
		acks := &jClients{started: map[string]string{}, runOf: map[string]string{}, done: map[string]bool{}}
		var writers []*jWriterProc
		for i, w := range jWriters {
			p := &jWriterProc{id: fmt.Sprintf("w%d.%d", round, i), session: w.session, mode: w.mode, out: &lineRecorder{}, done: make(chan struct{})}
			p.cmd = exec.Command("/usr/bin/python3", "-c", journalWriter, s.mnt(sessRel(w.session)+"/messages.jsonl"), p.id, w.mode)
			p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
			testkit.Must(t, p.cmd.Start())
			go func() { p.cmd.Wait(); close(p.done) }()
			t.Cleanup(func() { syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) })
			writers = append(writers, p)
		}
		stop := make(chan struct{})
		waitClients := runClients(s, round, 4, stop, acks)
		eventually(t, 10*time.Second, "every writer has opened its log", func() bool {
			for _, w := range writers {
				if ls := w.out.snapshot(); len(ls) == 0 || ls[0] != "ready" {
					return false
				}
			}
			return true
		})
		delay := time.Duration(50+rng.Intn(451)) * time.Millisecond
		time.Sleep(delay)

		dead := s.crash()
		kills++
		close(stop)
		if !waitDone(dead, 5*time.Second) {
			// A server thread stuck in the kernel: its connection must be
			// aborted before it can end (the watchdog should have).
			t.Logf("round %d: the killed server not reaped after 5 s; aborting its connections", round)
			mountlife.AbortDead(s.mnt("home"))
			mountlife.AbortDead(s.mnt("shared"))
			reaped(t, dead)
		}
		atKill := journalFiles(t, s.store) // the dead server changes nothing more
		for _, w := range writers {
			if !waitDone(w.done, 10*time.Second) {
				t.Logf("round %d: writer %s still there 10 s after the kill; killing it", round, w.id)
				syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
				mountlife.AbortDead(s.mnt("home"))
				mountlife.AbortDead(s.mnt("shared"))
				if !waitDone(w.done, 10*time.Second) {
					t.Fatalf("round %d: writer %s hangs on the dead mount", round, w.id)
				}
			}
		}
		waitClients(40 * time.Second)
		lazyUnmount(s)
		if len(atKill) > 1 {
			duringCheckpoint++
		}
		nStarted, nDone := len(acks.started), len(acks.done)
		var durable []string
		for _, w := range writers {
			d, written := w.acked()
			durable = append(durable, fmt.Sprintf("%s:%d/%d", w.id, d+1, written))
		}
		t.Logf("round %d: killed after %v with %d journal files; %d starts and %d dones received; mount lines durable/written %v",
			round, delay, len(atKill), nStarted, nDone, durable)
		if nStarted == 0 {
			t.Logf("round %d: no send got its start frame before the kill", round)
		}

		// The server is down: fsck reads the logs with the journal, and
		// must be clean (a temporary file a kill interrupted is not a
		// problem: the next load removes it).
		if out, code := s.fsck(); code != 0 || out != "clean\n" {
			t.Errorf("round %d: fsck after the kill: exit %d\n%s", round, code, out)
		}
		what := fmt.Sprintf("round %d, after the kill", round)
		starts, lines := checkJournalAcks(t, what, s, acks, writers, false)
		totalStarts, totalLines = totalStarts+starts, totalLines+lines

		// The next start replays the journal; its clean stop leaves none.
		s.start()
		// The sockets answer before the mounts are up.
		eventually(t, 10*time.Second, "one live mount each at home and shared", func() bool {
			return mountsAt(s.mnt("home")) == 1 && mountsAt(s.mnt("shared")) == 1
		})
		for _, name := range jSessions { // loads (recovers) each session
			s.mustRequest("coder", fmt.Sprintf(`{"op":"status","session":%q}`, name))
		}
		for _, name := range jSessions { // and what it serves is what the store holds
			rel := sessRel(name) + "/messages.jsonl"
			if got, want := s.readMnt(rel), fileBytes(t, filepath.Join(s.sessionDir(0, "coder", name), "messages.jsonl")); got != want {
				t.Errorf("round %d: the restarted server serves %d bytes of %s, the store holds %d", round, len(got), rel, len(want))
			}
		}
		s.kill(s.cmd, syscall.SIGTERM)
		if out, code := s.fsck(); code != 0 || out != "clean\n" {
			t.Errorf("round %d: fsck after the replay and a clean stop: exit %d\n%s", round, code, out)
		}
		if left := journalFiles(t, s.store); len(left) > 0 {
			t.Errorf("round %d: a clean stop left journal files %v", round, left)
		}
		checkJournalAcks(t, fmt.Sprintf("round %d, after the replay", round), s, acks, writers, true)
	}
	t.Logf("%d kills in %v: %d landed while an older journal file still existed (a checkpoint in flight); %d acknowledged starts and %d durable mount lines checked",
		kills, time.Since(began).Round(time.Millisecond), duringCheckpoint, totalStarts, totalLines)
	if !t.Failed() && (totalStarts == 0 || totalLines == 0) {
		t.Errorf("nothing acknowledged in %d rounds: %d starts, %d durable mount lines", journalRounds, totalStarts, totalLines)
	}
	if !t.Failed() && duringCheckpoint == 0 {
		t.Errorf("no kill landed during a checkpoint (more than one journal file at the kill) in %d rounds", journalRounds)
	}
}

// jBatch is one batch of a journal file, as read by the test.
type jBatch struct {
	pos  int64 // in the file
	num  uint64
	body int // length
	recs []jRec
}

// jRec is one record of a batch.
type jRec struct {
	kind byte // 1 append, 2 retire, 3 intent
	path string
	off  int64
	n    int
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// readJournal parses a journal file (header: magic, gen, batch number,
// writer token, body length, CRC-32C of the header's first 36 bytes and
// the body; body:
// kind (1), path length (2), path, binding (32), offset (8), data length
// (4), data; batches on 4096-byte boundaries) and fails the test unless
// every batch is valid.
func readJournal(t testing.TB, p string) []jBatch {
	t.Helper()
	b, err := os.ReadFile(p)
	testkit.Must(t, err)
	var out []jBatch
	for pos := 0; pos+jHeaderLen <= len(b); {
		h := b[pos:]
		if string(h[:8]) != jMagic {
			if bytes.Count(h, []byte{0}) == len(h) {
				break // reserved room, never written
			}
			t.Fatalf("%s: no batch at byte %d", p, pos)
		}
		num := binary.LittleEndian.Uint64(h[16:])
		body := int(binary.LittleEndian.Uint32(h[32:]))
		if pos+jHeaderLen+body > len(b) {
			t.Fatalf("%s: batch %d at byte %d runs past the end", p, num, pos)
		}
		if crc32.Update(crc32.Checksum(h[:36], castagnoli), castagnoli, h[jHeaderLen:jHeaderLen+body]) != binary.LittleEndian.Uint32(h[36:]) {
			t.Fatalf("%s: batch %d at byte %d: bad CRC", p, num, pos)
		}
		bt := jBatch{pos: int64(pos), num: num, body: body}
		for r := h[jHeaderLen : jHeaderLen+body]; len(r) > 0; {
			n := int(binary.LittleEndian.Uint16(r[1:]))
			rec := jRec{kind: r[0], path: string(r[3 : 3+n])}
			r = r[3+n+32:]
			rec.off = int64(binary.LittleEndian.Uint64(r))
			rec.n = int(binary.LittleEndian.Uint32(r[8:]))
			r = r[12+rec.n:]
			bt.recs = append(bt.recs, rec)
		}
		out = append(out, bt)
		pos += (jHeaderLen + body + jAlign - 1) / jAlign * jAlign
	}
	return out
}

// appends counts a batch's append records.
func (b jBatch) appends() int {
	n := 0
	for _, r := range b.recs {
		if r.kind == 1 {
			n++
		}
	}
	return n
}

// flipByte flips one bit of the byte at off of a file.
func flipByte(t testing.TB, p string, off int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	testkit.Must(t, err)
	defer f.Close()
	var b [1]byte
	_, err = f.ReadAt(b[:], off)
	testkit.Must(t, err)
	b[0] ^= 0x20
	_, err = f.WriteAt(b[:], off)
	testkit.Must(t, err)
}

// storeBytes is the store byte for byte, the journal included, without
// what a start writes even when it refuses (the lock, the server log).
func storeBytes(t testing.TB, store string) map[string]string {
	t.Helper()
	return testkit.Snapshot(t, store, func(rel string) bool {
		return rel == ".ctxfs.lock" || rel == "ctxfs.log"
	})
}

// killedWithJournal makes a server that checkpoints nothing, has it
// finish sends (each acknowledged durable, done frame received) to two
// sessions, kills it with SIGKILL, and returns the server (down) and its
// only journal file, which then holds every append.
func killedWithJournal(t *testing.T) (*server, string) {
	t.Helper()
	return killedAfter(t, func(s *server) {
		for i := 0; i < 4; i++ {
			for _, name := range []string{"d0", "d1"} {
				s.send(name, fmt.Sprintf("%s-%d", name, i), fmt.Sprintf("durable send %d to %s", i, name))
			}
		}
	})
}

// killedAfter is killedWithJournal with the server's work before the
// kill given by sends.
func killedAfter(t *testing.T, sends func(s *server)) (*server, string) {
	t.Helper()
	requireFUSE(t)
	s := newServerWith(t, func(s *server) {
		s.env = append(s.env, "CTXFS_CHECKPOINT_BYTES=1073741824", "CTXFS_CHECKPOINT_EVERY=1h")
	})
	keepFusectlAsIs(t)
	umountLeftovers(t, s.root)
	t.Cleanup(func() {
		mountlife.AbortDead(s.mnt("home"))
		mountlife.AbortDead(s.mnt("shared"))
	})
	sends(s)
	dead := s.crash()
	if !waitDone(dead, 5*time.Second) {
		mountlife.AbortDead(s.mnt("home"))
		mountlife.AbortDead(s.mnt("shared"))
		reaped(t, dead)
	}
	lazyUnmount(s)
	files := journalFiles(t, s.store)
	if len(files) != 1 {
		t.Fatalf("journal files after the kill: %v, want one (nothing checkpointed)", files)
	}
	return s, files[0]
}

// logsOf reads every session log of a store: path → content.
func logsOf(t testing.TB, store string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range storeLogs(t, store) {
		out[p] = fileBytes(t, p)
	}
	return out
}

// mountRefused runs `ctxfs mount` in the foreground on the server's root
// and store and returns its output, failing the test unless it exits
// non-zero within a few seconds (a start that goes on is stopped).
func mountRefused(t *testing.T, s *server) string {
	t.Helper()
	cmd := exec.Command(ctxfsBin, "mount", "--foreground", "--root", s.root, "--store", s.store)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	testkit.Must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("ctxfs mount on a damaged journal exited 0:\n%s", out.String())
		}
	case <-time.After(15 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		lazyUnmount(s)
		t.Fatalf("ctxfs mount on a damaged journal still runs after 15 s:\n%s", out.String())
	}
	return out.String()
}

// runsClosed fails the test unless every start event of each session has
// its done event: the restarted server closed what the crash (or the
// journal's loss) left open.
func runsClosed(t *testing.T, what string, s *server, sessions ...string) {
	t.Helper()
	for _, name := range sessions {
		ev := fileBytes(t, filepath.Join(s.sessionDir(0, "coder", name), "events.jsonl"))
		if a, b := strings.Count(ev, `"type":"start"`), strings.Count(ev, `"type":"done"`); a != b {
			t.Errorf("%s: session %s has %d start events and %d done events:\n%s", what, name, a, b, ev)
		}
	}
}

// TestJournalDamagedRecord: one flipped byte inside an early batch of the
// journal of a killed server (a batch with valid ones after it) is damage:
// fsck exits 1 naming the journal file; `ctxfs mount` refuses to start,
// pointing at fsck --repair, and changes nothing in the store; fsck
// --repair replays what can be proven, says what it lost (each log keeps
// exactly the bytes of the records before the damaged batch), and then
// fsck is clean and the server starts.
func TestJournalDamagedRecord(t *testing.T) {
	s, jf := killedWithJournal(t)
	batches := readJournal(t, jf)
	// The damaged batch: the second one that appends, so that the first
	// survives and valid batches follow.
	var bad int
	for i, seen := 0, 0; i < len(batches); i++ {
		if batches[i].appends() > 0 {
			if seen++; seen == 2 {
				bad = i
				break
			}
		}
	}
	if bad == 0 || bad >= len(batches)-2 {
		t.Fatalf("journal %s: %d batches, no early appending batch with later ones (picked %d)", jf, len(batches), bad)
	}
	before := logsOf(t, s.store)
	// What each log keeps after the repair: the bytes before its first
	// record in the damaged batch (every later record of that log then
	// starts past a gap). A log the damaged batch does not touch keeps all.
	keep := map[string]int64{}
	for p, c := range before {
		keep[p] = int64(len(c))
	}
	for _, r := range batches[bad].recs {
		p := filepath.Join(s.store, r.path)
		if _, ok := keep[p]; r.kind == 1 && ok && r.off < keep[p] {
			keep[p] = r.off
		}
	}
	flipByte(t, jf, batches[bad].pos+jHeaderLen+int64(batches[bad].body)/2)
	snap := storeBytes(t, s.store)

	out, code := s.fsck()
	if code != 1 || !fsckNames(out, jf) {
		t.Fatalf("fsck of a journal with a damaged batch %d of %d: exit %d, want 1 and a line naming %s:\n%s", bad, len(batches), code, jf, out)
	}
	t.Logf("fsck:\n%s", out)
	testkit.Same(t, "fsck", snap, storeBytes(t, s.store))

	msg := mountRefused(t, s)
	if !strings.Contains(msg, "fsck --repair") {
		t.Errorf("ctxfs mount refused a damaged journal without naming fsck --repair:\n%s", msg)
	}
	testkit.Same(t, "a refused ctxfs mount", snap, storeBytes(t, s.store))
	if n := mountsAt(s.mnt("home")) + mountsAt(s.mnt("shared")); n != 0 {
		t.Errorf("a refused ctxfs mount left %d mounts", n)
	}

	out, code = s.fsck("--repair")
	t.Logf("fsck --repair: exit %d\n%s", code, out)
	if fsckLine(out, jf+": ", "repaired") == "" {
		t.Errorf("fsck --repair: exit %d, want a line saying what it did about %s", code, jf)
	}
	// Nothing is cut: a log whose history past a byte the journal no longer
	// proves keeps its bytes and is unprovable (EIO) until a person decides;
	// fsck --repair and every later fsck name it.
	var damaged, whole []string
	for p, c := range before {
		if got := fileBytes(t, p); got != c {
			t.Errorf("fsck --repair changed %s (%d bytes, then %d): it must cut nothing", p, len(c), len(got))
		}
		if keep[p] < int64(len(c)) {
			damaged = append(damaged, p)
			if fsckLine(out, p+": ", "") == "" {
				t.Errorf("fsck --repair does not name %s, whose bytes past %d are no longer proven", p, keep[p])
			}
		} else {
			whole = append(whole, p)
		}
	}
	if len(damaged) == 0 {
		t.Fatalf("the damaged batch touched no log")
	}
	if (code == 0) != (len(damaged) == 0) {
		t.Errorf("fsck --repair: exit %d with %d logs left unprovable", code, len(damaged))
	}
	if left := journalFiles(t, s.store); len(left) > 0 {
		t.Errorf("fsck --repair left journal files %v", left)
	}
	out, code = s.fsck()
	if code != 1 {
		t.Errorf("fsck after fsck --repair: exit %d, want 1 naming %v\n%s", code, damaged, out)
	}
	for _, p := range damaged {
		if fsckLine(out, p+": ", "") == "" {
			t.Errorf("fsck after fsck --repair does not name %s:\n%s", p, out)
		}
	}
	for _, p := range whole {
		if fsckLine(out, p+": ", "") != "" {
			t.Errorf("fsck after fsck --repair names %s, which the damage did not touch:\n%s", p, out)
		}
	}
	s.start()
	for _, name := range []string{"d0", "d1"} {
		fr := s.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":"after-repair-%s","session":%q,"input":"after the repair"}`, name, name))
		damagedSession := false
		for _, p := range damaged {
			damagedSession = damagedSession || strings.Contains(p, "/"+name+"/")
		}
		last := fr[len(fr)-1]
		switch {
		case damagedSession && (last["type"] != "error" || last["code"] != "EIO"):
			t.Errorf("a send to %s, whose history is no longer proven: %v, want EIO", name, fr)
		case !damagedSession && last["type"] != "done":
			t.Errorf("a send to %s, untouched by the damage: %v", name, fr)
		}
	}
	s.kill(s.cmd, syscall.SIGTERM)
	for _, p := range storeLogs(t, s.store) {
		wholeLines(t, "after the repair", p, false)
	}
}

// TestJournalTornLastBatch: a flipped byte in the last batch of the newest
// journal file is a torn tail (the batch being written when the server
// died): not damage. fsck is clean, the server starts, and what is lost
// is exactly the last batch's appends: each log it touched is cut back to
// where its record there began, every other log is whole.
func TestJournalTornLastBatch(t *testing.T) {
	s, jf := killedWithJournal(t)
	batches := readJournal(t, jf)
	last := batches[len(batches)-1]
	if last.appends() == 0 {
		t.Fatalf("journal %s: the last batch appends nothing (%v)", jf, last.recs)
	}
	before := logsOf(t, s.store)
	keep := map[string]int64{}
	for p, c := range before {
		keep[p] = int64(len(c))
	}
	for _, r := range last.recs {
		p := filepath.Join(s.store, r.path)
		if _, ok := keep[p]; r.kind == 1 && ok && r.off < keep[p] {
			keep[p] = r.off
		}
	}
	flipByte(t, jf, last.pos+jHeaderLen+int64(last.body)/2)
	if out, code := s.fsck(); code != 0 || out != "clean\n" {
		t.Fatalf("fsck with a torn last batch: exit %d, want 0 and nothing\n%s", code, out)
	}
	s.start() // replays, dropping the torn batch
	lost := 0
	for p, c := range before {
		got := fileBytes(t, p)
		if int64(len(got)) < keep[p] || got[:keep[p]] != c[:keep[p]] {
			t.Errorf("after the replay, %s does not begin with the %d bytes before the torn batch", p, keep[p])
			continue
		}
		// What the torn batch held is gone (the restarted server may
		// append lines of its own after the cut).
		for _, l := range strings.SplitAfter(c[keep[p]:], "\n") {
			if l != "" && strings.Contains(got[keep[p]:], l) {
				t.Errorf("after the replay, %s still holds %q of the torn batch", p, l)
			}
			if l != "" {
				lost++
			}
		}
	}
	t.Logf("the torn last batch (%d records) lost %d lines", len(last.recs), lost)
	if lost == 0 {
		t.Errorf("the torn last batch lost no line")
	}
	for _, name := range []string{"d0", "d1"} {
		s.mustRequest("coder", fmt.Sprintf(`{"op":"status","session":%q}`, name))
	}
	runsClosed(t, "after the torn tail", s, "d0", "d1")
	s.send("d1", "after-torn", "after the torn tail")
	s.kill(s.cmd, syscall.SIGTERM)
	if out, code := s.fsck(); code != 0 || out != "clean\n" {
		t.Errorf("fsck after the replay and a clean stop: exit %d\n%s", code, out)
	}
	for _, p := range storeLogs(t, s.store) {
		wholeLines(t, "after the torn tail", p, false)
	}
}
