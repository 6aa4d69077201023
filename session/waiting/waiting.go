package waiting

import (
	"encoding/json"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/proto"
)

// The kinds of waiting call, as pending frames name them.
const (
	KindApproval = "approval" // answered by the op approve
	KindQuestion = "question" // ask_user, answered by the op answer
)

// ReasonTimeout is the reason of the deny a call gets at its deadline.
const ReasonTimeout = "timeout"

// Default bounds (Config).
const (
	DefaultPerUid = 64
	DefaultTotal  = 4096
)

// answeredPerRun is how many answered calls of one run are remembered for
// EALREADY; an answer to an older one is ENOENT. A run answers one call at
// a time and makes at most its steps of them.
const answeredPerRun = 64

// MaxCallIDBytes bounds a call id (the model names its calls, and the
// registry keeps the ids of answered ones): the requests' own bound.
const MaxCallIDBytes = proto.MaxCallIDBytes

// Key names one call: its run, and the id the model gave the call.
type Key struct{ Run, Call string }

// Place is the session a call waits in, as pending frames name it. List
// and InSession take one as a filter, where an empty field matches all.
type Place struct {
	Agent   string // the agent's (or PROVIDER/MODEL's) name
	Session string
	Scope   string
	Space   string // a shared session's space
}

func (p Place) matches(filter Place) bool {
	return (filter.Agent == "" || filter.Agent == p.Agent) &&
		(filter.Session == "" || filter.Session == p.Session) &&
		(filter.Scope == "" || filter.Scope == p.Scope) &&
		(filter.Space == "" || filter.Space == p.Space)
}

// Call is one waiting call, as the engine adds it and List returns it.
type Call struct {
	Key
	Place
	Owner     uint32          // the one uid that may answer: the session's owner, or a shared run's requester
	Kind      string          // KindApproval or KindQuestion
	Name      string          // the tool's name ("fs.write")
	Arguments json.RawMessage // an approval's call arguments
	Text      string          // a question's text
	Since     time.Time       // when it began to wait: its recorded request's ts
	Deadline  time.Time       // Since + the agent's approval_timeout (set by Add)
}

// Answer is an answer to a call.
type Answer struct {
	Kind     string // KindApproval for the op approve, KindQuestion for the op answer
	Decision string // an approval's agent.Decision…; deny for a timeout
	Reason   string // an approval's optional reason; ReasonTimeout for a timeout
	Text     string // a question's answer
	Uid      uint32 // who answered (set by the registry); 0, the server, for a timeout
	Timeout  bool   // the deadline answered, not a person
	// Groups are the answerer's gid and supplementary groups, as the
	// op that answers found them (none for a timeout): a dormant run's
	// shared space is checked with them when the answer resumes it.
	Groups []uint32
}

// Deliver takes a call's answer to the engine: it records it and lets the
// run go on (or continues a dormant one). The registry calls it exactly
// once per call added, outside its lock; what it returns is what Answer
// returns (for a timeout, nothing reads it). The run may be ending while
// it runs: it must not wait on the run for ever.
type Deliver func(Call, Answer) (*proto.Object, error)

// Config is the registry's bounds (0: the default).
type Config struct {
	PerUid int // calls one uid may have waiting (EAGAIN beyond)
	Total  int // calls all users together may have waiting
}

// Registry holds the waiting calls of the whole server. It is safe for
// concurrent use.
type Registry struct {
	waiting *quota.Quota // waiting calls per owner uid; root is not counted
	// rememberPerUid bounds the runs kept per owner (those with a call
	// waiting, and those that only remember answers): beyond it, the run
	// idle longest is forgotten.
	rememberPerUid int

	// mu guards the maps and every runState; it is never held while a
	// Deliver runs, nor taken by a timer's func before the timer's Add
	// returned.
	mu        sync.Mutex
	runs      map[string]*runState            // by run id
	byOwner   map[uint32]map[string]*runState // owner uid → run id → state: List reads only the caller's
	bySession map[Place]map[Key]*entry        // the waiting calls of each session
	clock     uint64                          // counts uses, for runState.used
}

// runState is what the registry knows of one run: its call waiting, if
// any, and the calls it answered last.
type runState struct {
	owner    uint32
	waiting  *entry
	answered []string // call ids, oldest first, at most answeredPerRun
	used     uint64   // Registry.clock at its last add or answer
}

func (rs *runState) hasAnswered(call string) bool {
	for _, c := range rs.answered {
		if c == call {
			return true
		}
	}
	return false
}

func (rs *runState) remember(call string) {
	if len(rs.answered) == answeredPerRun {
		rs.answered = append(rs.answered[:0], rs.answered[1:]...)
	}
	rs.answered = append(rs.answered, call)
}

// entry is one waiting call with its way to the engine and its timer.
type entry struct {
	call    Call
	deliver Deliver
	timer   *time.Timer
}

// New is an empty registry with c's bounds.
func New(c Config) *Registry {
	perUid, total := c.PerUid, c.Total
	if perUid <= 0 {
		perUid = DefaultPerUid
	}
	if total <= 0 {
		total = DefaultTotal
	}
	return &Registry{
		waiting:        quota.New("waiting calls", syscall.EAGAIN, perUid, total),
		rememberPerUid: 4 * perUid,
		runs:           map[string]*runState{},
		byOwner:        map[uint32]map[string]*runState{},
		bySession:      map[Place]map[Key]*entry{},
	}
}

// Add makes c wait until it is answered, its run is removed, or its
// deadline, c.Since + timeout, comes: then it is answered deny with reason
// ReasonTimeout through deliver. A deadline already past (a call added
// again after a restart, with its original Since) is answered so at once,
// from another goroutine. Refusals: EINVAL (a bad call, or a run already
// known with another owner), EBUSY (its run has a call waiting already),
// EALREADY (that call was answered), EAGAIN (the owner has the most
// waiting calls one uid may, or the server all it may hold).
func (r *Registry) Add(c Call, timeout time.Duration, deliver Deliver) error {
	if err := checkCall(c, deliver); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := r.runs[c.Run]
	switch {
	case rs != nil && rs.owner != c.Owner:
		return abi.Errorf(syscall.EINVAL, "wait", "run %s is answered by uid %d, not %d", c.Run, rs.owner, c.Owner)
	case rs != nil && rs.waiting != nil:
		return abi.Errorf(syscall.EBUSY, "wait", "run %s has call %s waiting already", c.Run, rs.waiting.call.Call)
	case rs != nil && rs.hasAnswered(c.Call):
		return abi.Errorf(syscall.EALREADY, "wait", "call %s of run %s was answered already", c.Call, c.Run)
	}
	if err := r.waiting.Take(c.Owner); err != nil {
		return err
	}
	if rs == nil {
		rs = r.newRun(c.Run, c.Owner)
	}
	c.Deadline = c.Since.Add(timeout)
	e := &entry{call: c, deliver: deliver}
	rs.waiting = e
	rs.used = r.tick()
	r.indexSession(e)
	e.timer = time.AfterFunc(time.Until(c.Deadline), func() { r.timeout(e) })
	return nil
}

func checkCall(c Call, deliver Deliver) error {
	switch {
	case c.Kind != KindApproval && c.Kind != KindQuestion:
		return abi.Errorf(syscall.EINVAL, "wait", "unknown kind of call %q", c.Kind)
	case c.Run == "" || c.Call == "":
		return abi.Errorf(syscall.EINVAL, "wait", "a waiting call needs its run and call id")
	case len(c.Call) > MaxCallIDBytes:
		return abi.Errorf(syscall.EINVAL, "wait", "call id of %d bytes, over %d", len(c.Call), MaxCallIDBytes)
	case deliver == nil:
		return abi.Errorf(syscall.EINVAL, "wait", "a waiting call needs a Deliver")
	}
	return nil
}

// Answer answers call k as uid: it refuses with EINVAL (a bad decision,
// or the op of the other kind of call), EACCES (uid may not answer k's
// run), EALREADY (k was answered already: by a person, by its timeout,
// or in the log the engine read, MarkAnswered) or ENOENT (no call k is
// waiting), and otherwise returns what the call's Deliver returns. Of an
// answer and the timeout racing, one wins and the other is EALREADY.
func (r *Registry) Answer(uid uint32, k Key, a Answer) (*proto.Object, error) {
	if err := checkAnswer(a); err != nil {
		return nil, err
	}
	e, err := r.take(uid, k, a.Kind)
	if err != nil {
		return nil, err
	}
	a.Uid, a.Timeout = uid, false
	return e.deliver(e.call, a)
}

func checkAnswer(a Answer) error {
	switch a.Kind {
	case KindApproval:
		if proto.ValidDecision(a.Decision) {
			return nil
		}
		return abi.Errorf(syscall.EINVAL, "approve", "decision %q is none of allow_once, allow_run, deny, stop", a.Decision)
	case KindQuestion:
		return nil
	}
	return abi.Errorf(syscall.EINVAL, "answer", "unknown kind of answer %q", a.Kind)
}

// take claims k's waiting call for uid's answer of kind, or says why not.
func (r *Registry) take(uid uint32, k Key, kind string) (*entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := opOf(kind)
	rs := r.runs[k.Run]
	switch {
	case rs == nil:
		return nil, abi.Errorf(syscall.ENOENT, op, "run %s has no call waiting", k.Run)
	case rs.owner != uid:
		return nil, abi.Errorf(syscall.EACCES, op, "only uid %d may answer the calls of run %s", rs.owner, k.Run)
	case rs.waiting != nil && rs.waiting.call.Call == k.Call:
		e := rs.waiting
		if e.call.Kind != kind {
			return nil, abi.Errorf(syscall.EINVAL, op, "call %s is a%s, answered by the op %s", k.Call, article(e.call.Kind), opOf(e.call.Kind))
		}
		r.claimLocked(rs, e)
		return e, nil
	case rs.hasAnswered(k.Call):
		return nil, abi.Errorf(syscall.EALREADY, op, "call %s of run %s was answered already", k.Call, k.Run)
	}
	return nil, abi.Errorf(syscall.ENOENT, op, "run %s has no call %s waiting", k.Run, k.Call)
}

// opOf is the op that answers a kind of call.
func opOf(kind string) string {
	if kind == KindQuestion {
		return "answer"
	}
	return "approve"
}

func article(kind string) string {
	if kind == KindApproval {
		return "n " + kind
	}
	return " " + kind
}

// timeout answers e deny at its deadline, unless an answer or its run's
// removal came first.
func (r *Registry) timeout(e *entry) {
	r.mu.Lock()
	rs := r.runs[e.call.Run]
	won := rs != nil && rs.waiting == e
	if won {
		r.claimLocked(rs, e)
	}
	r.mu.Unlock()
	if won {
		e.deliver(e.call, Answer{Kind: e.call.Kind, Decision: proto.DecisionDeny, Reason: ReasonTimeout, Timeout: true})
	}
}

// claimLocked takes e, the waiting call of rs, out of the waiting room:
// from now on its call is answered.
func (r *Registry) claimLocked(rs *runState, e *entry) {
	e.timer.Stop() // its func, if already running, finds e gone
	rs.waiting = nil
	rs.remember(e.call.Call)
	rs.used = r.tick()
	r.unindexSession(e)
	r.waiting.Give(e.call.Owner)
}

// MarkAnswered tells the registry that call k of a run owned by owner was
// answered (the engine found its answer in the log at a restart), so that
// an answer to it is EALREADY. EINVAL when the run is known with another
// owner.
func (r *Registry) MarkAnswered(owner uint32, k Key) error {
	if len(k.Call) > MaxCallIDBytes || k.Run == "" || k.Call == "" {
		return abi.Errorf(syscall.EINVAL, "wait", "bad call id")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := r.runs[k.Run]
	if rs == nil {
		rs = r.newRun(k.Run, owner)
	}
	if rs.owner != owner {
		return abi.Errorf(syscall.EINVAL, "wait", "run %s is answered by uid %d, not %d", k.Run, rs.owner, owner)
	}
	if !rs.hasAnswered(k.Call) {
		rs.remember(k.Call)
	}
	rs.used = r.tick()
	return nil
}

// Remove forgets run, as the run ends or is cancelled: its waiting call,
// if any, is dropped without an answer (and returned), and so is the memory
// of its answers. An answer to it is then ENOENT.
func (r *Registry) Remove(run string) (Call, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := r.runs[run]
	if rs == nil {
		return Call{}, false
	}
	r.forgetLocked(run, rs)
	if e := rs.waiting; e != nil {
		e.timer.Stop()
		r.unindexSession(e)
		r.waiting.Give(e.call.Owner)
		return e.call, true
	}
	return Call{}, false
}

// forgetLocked drops run from the maps (its waiting call is the caller's).
func (r *Registry) forgetLocked(run string, rs *runState) {
	delete(r.runs, run)
	owned := r.byOwner[rs.owner]
	delete(owned, run)
	if len(owned) == 0 {
		delete(r.byOwner, rs.owner)
	}
}

// newRun starts the state of a run owned by owner. Beyond rememberPerUid
// runs of that owner, the one idle longest without a call waiting is
// forgotten first: the engine removes runs as they end, so this only
// bounds what a missed Remove would leave.
func (r *Registry) newRun(run string, owner uint32) *runState {
	owned := r.byOwner[owner]
	if owned == nil {
		owned = map[string]*runState{}
		r.byOwner[owner] = owned
	}
	if len(owned) >= r.rememberPerUid {
		r.forgetIdlest(owned)
	}
	rs := &runState{owner: owner, used: r.tick()}
	owned[run] = rs
	r.runs[run] = rs
	return rs
}

func (r *Registry) forgetIdlest(owned map[string]*runState) {
	idlest := ""
	for run, rs := range owned {
		if rs.waiting == nil && (idlest == "" || rs.used < owned[idlest].used) {
			idlest = run
		}
	}
	if idlest != "" {
		r.forgetLocked(idlest, owned[idlest])
	}
}

func (r *Registry) tick() uint64 {
	r.clock++
	return r.clock
}

func (r *Registry) indexSession(e *entry) {
	calls := r.bySession[e.call.Place]
	if calls == nil {
		calls = map[Key]*entry{}
		r.bySession[e.call.Place] = calls
	}
	calls[e.call.Key] = e
}

func (r *Registry) unindexSession(e *entry) {
	calls := r.bySession[e.call.Place]
	delete(calls, e.call.Key)
	if len(calls) == 0 {
		delete(r.bySession, e.call.Place)
	}
}

// List is the calls uid may answer that wait in a place matching filter,
// oldest first. It reads only uid's own runs: its cost is bounded by what
// one uid may have waiting, whatever the server holds.
func (r *Registry) List(uid uint32, filter Place) []Call {
	r.mu.Lock()
	var calls []Call
	for _, rs := range r.byOwner[uid] {
		if e := rs.waiting; e != nil && e.call.Place.matches(filter) {
			calls = append(calls, e.call)
		}
	}
	r.mu.Unlock()
	sortCalls(calls)
	return calls
}

// InSession is the calls waiting in session p (its status shows their
// runs in phase approval), whoever may answer them, oldest first.
func (r *Registry) InSession(p Place) []Call {
	r.mu.Lock()
	var calls []Call
	for _, e := range r.bySession[p] {
		calls = append(calls, e.call)
	}
	r.mu.Unlock()
	sortCalls(calls)
	return calls
}

// Waiting is run's waiting call, if it has one.
func (r *Registry) Waiting(run string) (Call, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rs := r.runs[run]; rs != nil && rs.waiting != nil {
		return rs.waiting.call, true
	}
	return Call{}, false
}

// sortCalls orders calls by Since, then by run and call id, so that a
// listing is the same each time.
func sortCalls(calls []Call) {
	sort.Slice(calls, func(i, j int) bool {
		a, b := calls[i], calls[j]
		if !a.Since.Equal(b.Since) {
			return a.Since.Before(b.Since)
		}
		if a.Run != b.Run {
			return a.Run < b.Run
		}
		return a.Call < b.Call
	})
}
