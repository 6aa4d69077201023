package session

import (
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// tempSessions holds the temp sessions (SPEC 8: memory only, never
// listed, gone when the server stops) apart from the session cache, whose
// bound is on descriptors and whose eviction pass would walk them all at
// every load. Each uid holds at most Limits.TempSessions of them, whose
// logs hold at most Limits.TempBytes together (root is not counted: it is
// the reserve). One stays while a run of it is queued or running, and
// Limits.TempIdle after its last use (a request that found it, a run's
// end), so that its client may still ask for its status, resume its
// events and replay a send by its client id; then it is gone: its status
// is idle, and a send starts it anew.
type tempSessions struct {
	limits *quota.Limits
	mu     sync.Mutex
	byKey  map[string]*tempSession // by layout.Ref.Key
	byUid  map[uint32]map[*tempSession]struct{}
}

type tempSession struct {
	s     *sess
	uid   uint32
	used  time.Time
	timer *time.Timer // expire, TempIdle after used
}

func newTempSessions(l *quota.Limits) *tempSessions {
	return &tempSessions{limits: l, byKey: map[string]*tempSession{}, byUid: map[uint32]map[*tempSession]struct{}{}}
}

// find returns the temp session of key, used now.
func (ts *tempSessions) find(key string) (*sess, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.byKey[key]
	if t == nil {
		return nil, false
	}
	t.used = time.Now()
	return t.s, true
}

// has says whether key is held, without using it.
func (ts *tempSessions) has(key string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.byKey[key] != nil
}

// add holds the temp session of key that made makes for uid, unless key
// is held already, or refuses (EAGAIN) when uid holds all the temp
// sessions it may.
func (ts *tempSessions) add(key string, uid uint32, made func() *sess) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t := ts.byKey[key]; t != nil {
		t.used = time.Now()
		return nil
	}
	if err := ts.roomLocked(uid, 1, 0); err != nil {
		return err
	}
	t := &tempSession{s: made(), uid: uid, used: time.Now()}
	t.timer = time.AfterFunc(ts.limits.TempIdle, func() { ts.expire(t) }) // it waits for mu: timer is set
	ts.byKey[key] = t
	if ts.byUid[uid] == nil {
		ts.byUid[uid] = map[*tempSession]struct{}{}
	}
	ts.byUid[uid][t] = struct{}{}
	return nil
}

// admit refuses (EAGAIN) a run of input in a temp session of uid when its
// temp sessions' logs hold too much to take it.
func (ts *tempSessions) admit(uid uint32, input string) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.roomLocked(uid, 0, int64(len(input)))
}

// roomLocked refuses (EAGAIN) sessions more temp sessions of uid, or
// bytes more in their logs, beyond what uid may hold. Caller holds mu.
func (ts *tempSessions) roomLocked(uid uint32, sessions int, bytes int64) error {
	if uid == 0 {
		return nil
	}
	held := ts.byUid[uid]
	if len(held)+sessions > ts.limits.TempSessions {
		return abi.Errorf(syscall.EAGAIN, "send", "uid %d holds %d temp sessions, the most one uid may (one goes %s after its last use)", uid, len(held), ts.limits.TempIdle)
	}
	var size int64
	for t := range held {
		size += t.s.msgs.Size() + t.s.events.Size()
	}
	if size+bytes > ts.limits.TempBytes {
		return abi.Errorf(syscall.EAGAIN, "send", "uid %d's temp sessions hold %d bytes, and %d more is over the %d one uid may (one goes %s after its last use)", uid, size, bytes, ts.limits.TempBytes, ts.limits.TempIdle)
	}
	return nil
}

// touch notes a use of the temp session s (a run's end): its idle time
// starts again.
func (ts *tempSessions) touch(s *sess) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t := ts.byKey[s.ref.Key()]; t != nil && t.s == s {
		t.used = time.Now()
	}
}

// expire drops t once it has no run and nobody used it for TempIdle;
// else it looks again when that time would be up.
func (ts *tempSessions) expire(t *tempSession) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	key := t.s.ref.Key()
	if ts.byKey[key] != t {
		return
	}
	wait := ts.limits.TempIdle - time.Since(t.used)
	if !t.s.idle() {
		wait = ts.limits.TempIdle // its run's end touches it
	}
	if wait > 0 {
		t.timer.Reset(wait)
		return
	}
	delete(ts.byKey, key)
	delete(ts.byUid[t.uid], t)
	if len(ts.byUid[t.uid]) == 0 {
		delete(ts.byUid, t.uid)
	}
}

// admitTemp is tempSessions.admit for a send's new run, nil when it is
// not to a temp session.
func (e *Engine) admitTemp(c layout.Caller, loc *location, req *proto.Request) error {
	if !loc.ref.Temp {
		return nil
	}
	return e.temps.admit(c.Uid, req.Input)
}
