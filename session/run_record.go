package session

import (
	"strings"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/runqueue"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// maxRunStream bounds what one run may stream, in bytes of frames (deltas
// included): beyond it the run is stopped with an EFBIG error and ends
// done error. With the per-uid quota of runs, it bounds the memory a user
// can make the server hold for frames not yet recorded. (A variable for
// the tests.)
var maxRunStream = 16 << 20

// recordWait records a host fact of the run (SPEC 17) as the agent's
// frames are, and returns it as recorded once its batch is durable and
// handed to the readers; an error when the run was cancelled before or
// its batch could not be recorded.
func (rn *run) recordWait(f *proto.Object) (*proto.Object, error) {
	fr, ack, err := rn.q.AddWait(f)
	if err != nil {
		return nil, err
	}
	<-ack
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.broken != nil {
		return nil, rn.broken
	}
	return fr, nil
}

// recorder records the run's frames in batches: whatever arrived while the
// previous batch was syncing goes into the next, in one durable append per
// log. Frames reach readers only once recorded.
func (rn *run) recorder() {
	for range rn.q.Wake() {
		frames, final, status := rn.q.Take()
		rn.mu.Lock()
		rn.recordBatch(frames, final, status)
		rn.mu.Unlock()
		rn.q.Ack(frames)
		if final {
			return
		}
	}
}

// batch is what one recorder pass writes: lines for each log, the frames
// for the readers in order, and the latest assistant message.
type batch struct {
	events, msgs []byte
	push         []*proto.Object
	latest       *proto.Object
}

// eventsRoom is about what frames take of events.jsonl, with the end of
// the run when final: a batch's lines are gathered in one allocation.
func eventsRoom(frames []*proto.Object, final bool) int {
	n := 0
	if final {
		n = 256 // done and the state
	}
	for _, fr := range frames {
		if fr.Str("type") != proto.FrameDelta {
			n += len(fr.Line())
		}
	}
	return n
}

// add files one stamped frame: every frame but a delta goes to
// events.jsonl; messages and tool results also to messages.jsonl.
func (b *batch) add(rn *run, fr *proto.Object) {
	b.push = append(b.push, fr)
	if fr.Str("type") == proto.FrameMessage {
		rn.deltas = nil // a message carries the text streamed before it
	}
	if fr.Str("type") == proto.FrameDelta {
		text, _ := fr.String("text")
		rn.deltas = append(rn.deltas, text) // pieces: no copy that doubles as it grows
		return
	}
	b.events = append(b.events, fr.Line()...)
	if fr.Str("type") == proto.FrameError {
		rn.errCode = fr.Str("code")
	}
	if msg := proto.MessageLine(fr); msg != nil {
		b.msgs = append(b.msgs, msg.Line()...)
		if msg.Str("role") == "assistant" {
			b.latest = msg
			rn.sawMsg = true
		}
	}
}

// recordBatch writes frames (and, when final, the end of the run) durably,
// then hands them to the readers: a client never gets a frame that is not
// on disk. A batch that cannot be recorded ends the run (fail). Caller
// holds rn.mu.
func (rn *run) recordBatch(frames []*proto.Object, final bool, status string) {
	if rn.broken != nil {
		return // the run ended when its batch failed; what came after is dropped
	}
	b := batch{events: make([]byte, 0, eventsRoom(frames, final))}
	for _, fr := range frames {
		b.add(rn, fr)
	}
	if !final {
		rn.commit(&b)
		return
	}
	if status != abi.StateCancelled && len(rn.deltas) > 0 {
		// The streamed text is the run's answer: recorded after the
		// batch's own frames, a message at a time.
		if !rn.commit(&b) || !rn.recordDeltaText() {
			return
		}
	}
	for _, f := range rn.s.e.kids.End(rn.id, status) { // its children end with it, unless it ended ok
		b.add(rn, runqueue.Stamp(f, rn.id, time.Now()))
	}
	done := rn.closing(&b, status)
	if rn.commit(&b) {
		rn.end(done)
	}
}

// commit writes a batch durably as one unit, then hands its frames to the
// readers, and empties it; the deltas before its first recorded frame
// report no line and go first, not after the sync. A batch that cannot be
// recorded ends the run (fail) and commit reports false.
func (rn *run) commit(b *batch) bool {
	s := rn.s
	for ; len(b.push) > 0 && b.push[0].Str("type") == proto.FrameDelta; b.push = b.push[1:] {
		rn.stream.Push(b.push[0])
	}
	if len(b.events) > 0 || len(b.msgs) > 0 {
		if err := s.appendBoth(b.events, b.msgs); err != nil {
			rn.fail(err)
			return false
		}
		if b.latest != nil {
			s.writeLatest(b.latest)
		}
		s.touch(time.Now(), "")
	}
	for _, fr := range b.push {
		rn.stream.Push(fr)
	}
	*b = batch{}
	return true
}

// recordDeltaText records the text a run streamed as deltas, with no
// message to carry it, as assistant messages of at most abi.MaxMessageText
// bytes each (one line may hold at most abi.MaxLineBytes), one durable
// append each: the run holds at most one message's copy of its text
// besides the pieces, which are let go as they are recorded.
func (rn *run) recordDeltaText() bool {
	var text strings.Builder
	flush := func() bool {
		if text.Len() == 0 {
			return true
		}
		parts := []*proto.Object{proto.NewObject("type", "text", "text", text.String())}
		var b batch
		b.add(rn, runqueue.Stamp(proto.NewObject("type", proto.FrameMessage, "role", "assistant", "content", parts), rn.id, time.Now()))
		text.Reset()
		return rn.commit(&b)
	}
	deltas := rn.deltas
	rn.deltas = nil // each message flush records is made from these
	for i, piece := range deltas {
		deltas[i] = ""
		for _, chunk := range abi.SplitText(piece, abi.MaxMessageText) {
			if text.Len()+len(chunk) > abi.MaxMessageText && !flush() {
				return false
			}
			text.WriteString(chunk)
		}
	}
	return flush()
}

// fail ends a run whose frames could not be recorded (a full disk, an
// unprovable log): the agent is stopped, nothing of the batch from its first
// recorded frame on reaches a reader, and the end is recorded as an error
// event with the errno, done error and state error, then handed to the
// readers. When even that cannot be recorded, readers get no frame at all
// (the stream ends without done) and the session keeps the run to close,
// so that the log ends it at the next chance (sess.closePending). Caller
// holds rn.mu.
func (rn *run) fail(err error) {
	rn.broken = err
	rn.cancelRun()                         // damaged or full history is never built upon
	rn.s.e.kids.End(rn.id, abi.StateError) // its children end too; that cannot be recorded here either
	errEv, done := errorEnd(rn.id, abi.Errno(err), "the run's frames could not be recorded: "+err.Error())
	rn.s.mu.Lock()
	rn.ending = true
	rn.s.mu.Unlock()
	rn.finalState = "" // endRun writes the state when it records it
	rn.errCode = abi.ErrnoName(abi.Errno(err))
	if rn.s.endRun(rn.rec, errEv, done) == nil {
		rn.stream.Push(errEv)
	} else {
		done = nil
	}
	rn.end(done)
}

// finalStates is a session's state after a run that ended with a status,
// when no other run is active.
var finalStates = map[string]string{"ok": abi.StateDone, abi.StateError: abi.StateError, abi.StateCancelled: abi.StateCancelled}

// closing adds the end of a run to the final batch: done, and the
// session's new state when no other run is active.
func (rn *run) closing(b *batch, status string) *proto.Object {
	now := time.Now()
	done := proto.NewObject("type", proto.FrameDone, "run", rn.id, "status", status, "ts", abi.TS(now))
	b.events = append(b.events, done.Line()...)
	rn.s.mu.Lock()
	rn.ending = true
	rn.s.mu.Unlock()
	if rn.s.othersActive(rn.id) == 0 {
		state := finalStates[status]
		b.events = append(b.events, proto.NewObject("type", proto.FrameState, "state", state, "run", rn.id, "ts", abi.TS(now)).Line()...)
		rn.finalState = state
	}
	return done
}

// end forgets a finished run and hands its done frame (nil: none could be
// recorded) to the readers. The run's marker goes first: a client that saw
// done finds no trace of it.
func (rn *run) end(done *proto.Object) {
	s := rn.s
	if rn.finalState != "" {
		s.writeState(rn.finalState)
	}
	s.mu.Lock()
	if done != nil {
		rn.rec.done = done
	}
	delete(s.active, rn.id)
	s.mu.Unlock()
	if s.rel == "" {
		s.e.temps.touch(s) // kept TempIdle from now, for its client's questions
	}
	s.e.forgetRun(rn) // the waiting room keeps its answers: a second one is EALREADY

	close(rn.over)
	rn.logEnd(done)
	if done != nil {
		rn.stream.Push(done)
	}
	rn.stream.End()
}

// appendBoth appends to events.jsonl and messages.jsonl as one unit
// (sealedlog.AppendPair): both durable, their syncs overlapping, or, when
// either is refused, neither written.
func (s *sess) appendBoth(events, msgs []byte) error {
	if err := sealedlog.AppendPair(s.events, events, s.msgs, msgs); err != nil {
		return err
	}
	s.appended(abi.FileEvents, abi.FileMessages)
	return nil
}
