package session

import (
	"bufio"
	"crypto/sha256"
	"io"
	"sync"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// sess is the engine's in-memory view of one session directory (or of one
// temp session, which has no directory). It is loaded once and kept.
type sess struct {
	e     *Engine
	ref   layout.Ref
	rel   string // the session directory, relative to the store; "" for temp sessions
	own   storefs.Owner
	scope string

	msgs, events *sealedlog.Log
	meta         metaSeen // meta.json as last read (meta_seen.go)

	// fileMu serialises the single-value files and latest.md, which several
	// runs of the session update.
	fileMu    sync.Mutex
	updatedAt int64
	cwd       string
	tempState string          // a temp session's state, which it has no file to hold
	present   map[string]bool // derived files the store holds as regular files (writeFileLocked)
	gone      map[string]bool // snapshots the store is known not to hold (putSnapshotLocked)

	mu      sync.Mutex
	clients map[string]*clientRecord // client id → its send, from the start events
	pending []pendingEnd             // ends of runs still to be recorded (endRun)
	active  map[string]*run          // runs queued or running in this process
	slots   chan struct{}            // the per-session run limit (NumCPU×4)
}

// clientRecord is what a client id's first send recorded: enough to tell a
// replay from a reuse, and to answer the replay.
type clientRecord struct {
	run string
	// sum is the SHA-256 of the send's input, what tells a replay from a
	// reuse; the input itself is kept only for a run found unfinished at
	// load, which a restart may resume (restartRun): kept for every send,
	// a loaded session held all its inputs, and one uid's sends of 1 MiB
	// grew the server by about 1.6 MiB each, for good.
	sum   inputSum
	input string
	scope string
	cwd   string
	start *proto.Object
	done  *proto.Object // nil while the run has not finished
	// waiting is the run's last approval_request or question with no
	// answer recorded (SPEC 17), nil when none: a run found unfinished
	// with one waits again after a restart instead of being interrupted.
	waiting *proto.Object

	// ready is closed once start is recorded (or the send failed, then
	// failed is set and the record is gone from clients).
	ready  chan struct{}
	failed bool
}

// inputSum is the SHA-256 of a send's input (clientRecord.sum).
type inputSum [sha256.Size]byte

func sumInput(input string) (sum inputSum) {
	h := sha256.New()
	io.WriteString(h, input)
	h.Sum(sum[:0])
	return sum
}

// provable returns EIO when either log is unprovable.
func (s *sess) provable() error {
	if err := s.events.Check(); err != nil {
		return err
	}
	return s.msgs.Check()
}

// ready is provable, then the ends of runs still to be recorded: what
// every append to the session checks first.
func (s *sess) ready() error {
	if err := s.provable(); err != nil {
		return err
	}
	return s.closePending()
}

// readyToAppend is ready for an append to l alone, which checks l itself
// as it writes (under l's lock, an instant later): here only the other
// log is checked, unless ends of runs wait to be recorded first. Checking
// l twice was one fstat in seven of an append through the mount.
func (s *sess) readyToAppend(l *sealedlog.Log) error {
	other := s.events
	if l == s.events {
		other = s.msgs
	}
	if err := other.Check(); err != nil {
		return err
	}
	s.mu.Lock()
	pending := len(s.pending) > 0
	s.mu.Unlock()
	if pending {
		return s.ready()
	}
	return nil
}

// scanLines calls fn for every complete line of l's committed content.
func scanLines(l *sealedlog.Log, fn func(line []byte)) error {
	sc := bufio.NewScanner(io.NewSectionReader(l, 0, l.Size()))
	sc.Buffer(make([]byte, 64*1024), abi.MaxLineBytes+2)
	for sc.Scan() {
		fn(sc.Bytes())
	}
	return sc.Err()
}

// rebuildClients reads the logs once to learn every client id's send: the
// start events give run, scope and cwd, the done events the final frames,
// and the user messages the inputs. It returns the runs that started but
// never finished (interrupted by a crash).
func (s *sess) rebuildClients() (unfinished []*clientRecord, last derived, err error) {
	byRun := map[string]*clientRecord{}
	err = scanLines(s.events, func(line []byte) {
		o, perr := proto.ParseObject(line, false)
		if perr != nil {
			return
		}
		last.seen(o)
		switch o.Str("type") {
		case proto.FrameStart:
			rec := &clientRecord{run: o.Str("run"), scope: o.Str("scope"), cwd: o.Str("cwd"), start: o, ready: closedChan}
			if id := o.Str("client_id"); id != "" {
				s.clients[id] = rec
			}
			byRun[rec.run] = rec
		case proto.FrameDone:
			if rec := byRun[o.Str("run")]; rec != nil {
				rec.done = o
			}
		case proto.FrameState:
			last.state = o.Str("state")
		case proto.FrameApprovalRequest, proto.FrameQuestion, proto.FrameApprovalResult, proto.FrameAnswer:
			if rec := byRun[o.Str("run")]; rec != nil {
				rec.noteWaiting(o)
			}
		}
	})
	if err != nil {
		return nil, last, err
	}
	err = scanLines(s.msgs, func(line []byte) {
		o, perr := proto.ParseObject(line, false)
		if perr != nil {
			return
		}
		last.seen(o)
		switch o.Str("role") {
		case "assistant":
			last.latest = o
		case "user":
			if rec := byRun[o.Str("run")]; rec != nil {
				input, _ := o.String("content")
				rec.sum = sumInput(input)
				if rec.done == nil { // events.jsonl, read first, gave a finished run's done
					rec.input = input
				}
			}
		}
	})
	for _, rec := range byRun {
		if rec.done == nil {
			unfinished = append(unfinished, rec)
		}
	}
	return unfinished, last, err
}

// derived is what the logs say the derived files should hold.
type derived struct {
	state   string        // the last state event's state
	latest  *proto.Object // the last assistant message
	updated int64         // the latest "ts" of a line, in Unix seconds
}

// seen notes a line's time: updated_at is at least the newest.
func (d *derived) seen(o *proto.Object) {
	if ts, ok := o.String("ts"); ok {
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil && t.Unix() > d.updated {
			d.updated = t.Unix()
		}
	}
}

// reconcile rewrites derived files that lag the logs: they are written
// behind and replaced without a sync (layout.ReplaceValue), so a crash or a
// power loss can leave them behind. A missing state file is left missing
// (an old session, SPEC 12).
func (s *sess) reconcile(last derived) {
	if last.updated > s.updatedAt {
		s.setUpdatedAt(last.updated) // the index's order is its own (journaled)
	}
	if last.state != "" {
		if cur, err := s.e.readValue(s.file(abi.FileState)); err == nil && cur != last.state {
			s.writeState(last.state)
		}
	}
	if last.latest != nil {
		want := proto.MessageOf(last.latest).Text() + "\n"
		if cur, err := s.e.root.ReadFile(s.file(abi.FileLatest), maxLatest); err != nil || string(cur) != want {
			s.writeLatest(last.latest)
		}
	}
}

// maxLatest bounds what is read of latest.md: one message, at most a line.
const maxLatest = abi.MaxLineBytes

// file is the store path of one of the session's files.
func (s *sess) file(name string) string { return s.rel + "/" + name }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
