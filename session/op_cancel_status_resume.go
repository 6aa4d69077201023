package session

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/reply"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// cancel stops one run, named by its run id or its client id (SPEC 7, 10).
// A run that is not running here is reported stale, and the attempt is
// recorded as an event in the request's session when that session exists.
func (e *Engine) cancel(c layout.Caller, loc *location, req *proto.Request) (*Reply, error) {
	rn := e.findRun(c, loc, req)
	if rn != nil {
		rn.cancelRun()
		return reply.New([]*proto.Object{proto.NewObject("type", proto.FrameCancel, "run", rn.id, "cancelled", true)}), nil
	}
	runID := req.ID
	s, release, err := e.lookup(loc.ref)
	if err == nil {
		defer release()
		s.mu.Lock()
		if rec := s.clients[req.ID]; rec != nil && rec.run != "" {
			runID = rec.run
		}
		s.mu.Unlock()
		if s.cancelDormant(c, runID) {
			return reply.New([]*proto.Object{proto.NewObject("type", proto.FrameCancel, "run", runID, "cancelled", true)}), nil
		}
		if s.ready() == nil {
			ev := proto.NewObject("type", proto.FrameCancel, "run", runID, "cancelled", false, "stale", true,
				"requested_id", req.ID, "uid", c.Uid, "pid", c.Pid, "ts", abi.TS(time.Now()))
			if err := s.appendEvents(ev); err != nil {
				return nil, err
			}
			s.touch(time.Now(), "")
		}
	} else if !errors.Is(err, syscall.ENOENT) {
		return nil, err
	}
	return reply.New([]*proto.Object{proto.NewObject("type", proto.FrameCancel, "run", runID, "cancelled", false, "stale", true)}), nil
}

// findRun finds a queued or running run the caller may cancel: by run id
// anywhere the caller's request could reach; by client id in the
// request's session when it names one, else in every session of the
// caller's home or space at this agent or model, the newest (SPEC 7).
func (e *Engine) findRun(c layout.Caller, loc *location, req *proto.Request) *run {
	id := req.ID
	e.mu.Lock()
	defer e.mu.Unlock()
	if abi.IsRunID(id) {
		if rn := e.runs[id]; rn != nil && rn.s.ref.Container == loc.ref.Container && rn.s.ref.Temp == loc.ref.Temp {
			return rn
		}
		return nil
	}
	var newest *run
	for _, rn := range e.runs {
		ref := rn.s.ref
		switch {
		case rn.clientID != id || ref.Container != loc.ref.Container || ref.Temp != loc.ref.Temp:
		case req.SessionGiven && ref.Name != loc.ref.Name:
		case newest == nil || rn.started.After(newest.started):
			newest = rn
		}
	}
	return newest
}

// status reports a session's state, its queued and running runs,
// updated_at, and how full a model API's window is. A missing session is idle.
func (e *Engine) status(c layout.Caller, loc *location) (*Reply, error) {
	st := proto.NewObject("type", proto.FrameStatus, "session", loc.ref.Name, "state", abi.StateIdle)
	runs := []*proto.Object{}
	var updated int64
	if s, release, err := e.lookup(loc.ref); err == nil {
		defer release()
		st.Set("state", s.currentState())
		s.mu.Lock()
		active := make([]*run, 0, len(s.active))
		for _, rn := range s.active {
			active = append(active, rn)
		}
		s.mu.Unlock()
		for _, rn := range active {
			runs = append(runs, proto.NewObject("run", rn.id, "phase", rn.phaseNow()))
		}
		runs = append(runs, e.dormantRuns(s, loc)...)
		if defn, err := e.definition(loc.ref.Container); err == nil && defn.AnsweredByAPI() {
			st.Set("window", agent.WindowStatus(s.windowSpec(c, loc, defn)))
		}
		s.fileMu.Lock()
		updated = s.updatedAt
		s.fileMu.Unlock()
	} else if !errors.Is(err, syscall.ENOENT) {
		return nil, err
	}
	st.Set("runs", runs)
	st.Set("updated_at", updated)
	return reply.New([]*proto.Object{st}), nil
}

// compact runs the session's compaction strategy now (SPEC 18;
// agent.CompactFrame); EBUSY while a run is active or waits (it keeps its
// own window). No run is recorded, messages.jsonl is not touched.
func (e *Engine) compact(c layout.Caller, loc *location) (*Reply, error) {
	defn, err := e.definition(loc.ref.Container)
	if err != nil {
		return nil, err
	}
	s, release, err := e.lookup(loc.ref)
	if err != nil {
		return nil, err
	}
	defer release()
	if !s.idle() {
		return nil, abi.Errorf(syscall.EBUSY, "compact", "a run of the session is active or waits (or the session is temp: it keeps no summary)")
	}
	// A compaction holds one of the caller's runs while it works (EAGAIN
	// past them, at once): it runs a program of the uid's or asks the
	// provider, and holds the session's prompt, as a run does; bounded by
	// nothing else, a uid's 1,024 ctl files ran as many at once.
	ticket, err := e.takeRun(c.Uid)
	if err != nil {
		return nil, err
	}
	defer ticket.cancel()
	f, err := agent.CompactFrame(context.Background(), s.windowSpec(c, loc, defn))
	if err != nil {
		return nil, err
	}
	return reply.New([]*proto.Object{f}), nil
}

// currentState is the state file's value; a temp session's is the one its
// runs left in memory (idle before its first, active while one runs).
func (s *sess) currentState() string {
	if s.rel != "" {
		if v, err := s.e.readValue(s.file(abi.FileState)); err == nil {
			return v
		}
	} else {
		s.fileMu.Lock()
		state := s.tempState
		s.fileMu.Unlock()
		if state != "" {
			return state
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.active) > 0 {
		return abi.StateActive
	}
	return abi.StateIdle
}

// resume answers with the recorded events after the last line of run
// `after` (all of them without after), then the live frames of the runs
// active now, then the end.
func (e *Engine) resume(loc *location, req *proto.Request) (*Reply, error) {
	s, release, err := e.lookup(loc.ref)
	if err != nil {
		return nil, err
	}
	defer release()
	// A run records a frame and pushes it to its stream under its own lock,
	// so holding every active run's lock while the stream positions are
	// taken and the log is read means no frame is both read and followed,
	// and none is missed.
	s.mu.Lock()
	active := make([]*run, 0, len(s.active))
	for _, rn := range s.active {
		active = append(active, rn)
	}
	s.mu.Unlock()
	var follows []*reply.Reader
	for _, rn := range active { // never rn.mu inside s.mu: endRun nests the other way
		rn.mu.Lock()
		defer rn.mu.Unlock()
		follows = append(follows, rn.stream.Join())
	}
	// The recorded frames are those below the log's end now, read as the
	// reply is read (recorded); what comes later, the followed runs bring.
	rec := &recorded{e: e, ref: loc.ref, end: s.events.Size()}
	if req.After != "" {
		rec.off, err = endOfRun(s.events, rec.end, req.After)
		if err == nil && rec.off < 0 {
			err = abi.Errorf(syscall.ENOENT, "resume", "no run %s in session %s", req.After, loc.ref.Name)
		}
		if err != nil {
			for _, rd := range follows {
				rd.Leave()
			}
			return nil, err
		}
	}
	return reply.NewFrom(rec.next, follows...), nil
}

// endOfRun is where the last line of run ends in the log's first end
// bytes, -1 when no line names it. Only lines that hold the run's id (or
// an escape, which could spell it) are parsed.
func endOfRun(l *sealedlog.Log, end int64, run string) (int64, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(l, 0, end), 64<<10)
	at, cut := int64(0), int64(-1)
	for {
		line, err := proto.ReadLineWithin(br, abi.MaxLineBytes)
		at += int64(len(line))
		if bytes.Contains(line, []byte(run)) || bytes.Contains(line, []byte(`\u`)) {
			if o, perr := proto.ParseObject(bytes.TrimSuffix(line, []byte("\n")), false); perr == nil && o.Str("run") == run {
				cut = at
			}
		}
		switch {
		case err == io.EOF:
			return cut, nil
		case errors.Is(err, proto.ErrLineTooLong):
			return 0, abi.Errorf(syscall.EIO, "resume", "a line of events.jsonl is over %d bytes", abi.MaxLineBytes)
		case err != nil:
			return 0, err
		}
	}
}

// replayLive answers a retried send whose run still runs: its start, what
// the run has recorded since (from the log, not from memory), then its
// live frames. Deltas streamed before the replay joined are not in the
// record (they are previews of the message recorded at the end); the rest
// is, in order. A run records a batch and pushes it to its stream under
// rn.mu, so holding rn.mu while joining and reading means no frame is both
// read and followed, and none is missed.
func (s *sess) replayLive(rec *clientRecord, rn *run) *Reply {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	live := rn.stream.Join()
	frames := []*proto.Object{rec.start}
	scanLines(s.events, func(line []byte) {
		o, err := proto.ParseObject(line, false)
		if err != nil || o.Str("run") != rn.id {
			return
		}
		if t := o.Str("type"); t != proto.FrameStart && t != proto.FrameState {
			frames = append(frames, o)
		}
	})
	return reply.New(frames, live)
}
