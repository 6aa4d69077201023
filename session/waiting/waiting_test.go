package waiting

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

const (
	ann uint32 = 1001
	bob uint32 = 1002
)

var (
	place   = Place{Agent: "coder", Session: "default", Scope: "private"}
	epoch   = time.Now()
	hour    = time.Hour
	approve = Answer{Kind: KindApproval, Decision: proto.DecisionAllowOnce}
)

// deliveries counts what a call's Deliver got, and replies a frame that
// names the answer, as the engine's recorded approval_result would.
type deliveries struct {
	mu  sync.Mutex
	got []Answer
}

func (d *deliveries) deliver(c Call, a Answer) (*proto.Object, error) {
	d.mu.Lock()
	d.got = append(d.got, a)
	d.mu.Unlock()
	return proto.NewObject("type", "approval_result", "run", c.Run, "id", c.Call, "decision", a.Decision), nil
}

func (d *deliveries) answers() []Answer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Answer(nil), d.got...)
}

func approval(owner uint32, run, call string, since time.Time) Call {
	return Call{Key: Key{run, call}, Place: place, Owner: owner, Kind: KindApproval, Name: "fs.write", Since: since}
}

func mustAdd(t *testing.T, r *Registry, c Call, timeout time.Duration, d *deliveries) {
	t.Helper()
	if err := r.Add(c, timeout, d.deliver); err != nil {
		t.Fatalf("Add(%v): %v", c.Key, err)
	}
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if got := abi.Errno(err); err == nil || got != want {
		t.Fatalf("%s: got %v (%v), want %v", what, err, abi.ErrnoName(got), abi.ErrnoName(want))
	}
}

// The answer rules: who may answer (EACCES, nothing delivered), a bad
// decision or the other op (EINVAL), no such call (ENOENT), the answer
// (delivered once, with the answerer's uid), a second one (EALREADY).
func TestAnswerRules(t *testing.T) {
	r := New(Config{})
	var d deliveries
	k := Key{"run-a", "c1"}
	mustAdd(t, r, approval(ann, k.Run, k.Call, epoch), hour, &d)

	_, err := r.Answer(bob, k, approve)
	wantErrno(t, "another uid", err, syscall.EACCES)
	_, err = r.Answer(ann, k, Answer{Kind: KindApproval, Decision: "allow_always"})
	wantErrno(t, "bad decision", err, syscall.EINVAL)
	_, err = r.Answer(ann, k, Answer{Kind: KindQuestion, Text: "yes"})
	wantErrno(t, "the answer op on an approval", err, syscall.EINVAL)
	_, err = r.Answer(ann, Key{k.Run, "c9"}, approve)
	wantErrno(t, "another call id", err, syscall.ENOENT)
	_, err = r.Answer(ann, Key{"run-z", "c1"}, approve)
	wantErrno(t, "another run", err, syscall.ENOENT)
	if n := len(d.answers()); n != 0 {
		t.Fatalf("refused answers delivered %d times", n)
	}
	if got := r.List(ann, Place{}); len(got) != 1 {
		t.Fatalf("after refusals ann lists %d calls, want 1", len(got))
	}

	f, err := r.Answer(ann, k, Answer{Kind: KindApproval, Decision: proto.DecisionDeny, Reason: "no"})
	if err != nil || f.Str("decision") != proto.DecisionDeny {
		t.Fatalf("answer: %v, %v", f, err)
	}
	got := d.answers()
	if len(got) != 1 || got[0].Uid != ann || got[0].Reason != "no" || got[0].Timeout {
		t.Fatalf("delivered %+v", got)
	}
	_, err = r.Answer(ann, k, approve)
	wantErrno(t, "second answer", err, syscall.EALREADY)
	_, err = r.Answer(bob, k, approve)
	wantErrno(t, "second answer by another uid", err, syscall.EACCES)
	if len(r.List(ann, Place{})) != 0 || len(d.answers()) != 1 {
		t.Fatalf("after the answer: listed %v, delivered %d", r.List(ann, Place{}), len(d.answers()))
	}
}

func TestQuestionAnswer(t *testing.T) {
	r := New(Config{})
	var d deliveries
	k := Key{"run-q", "ask1"}
	c := Call{Key: k, Place: place, Owner: ann, Kind: KindQuestion, Name: "ask_user", Text: "which branch?", Since: epoch}
	mustAdd(t, r, c, hour, &d)
	_, err := r.Answer(ann, k, approve)
	wantErrno(t, "approve on a question", err, syscall.EINVAL)
	if _, err := r.Answer(ann, k, Answer{Kind: KindQuestion, Text: "main"}); err != nil {
		t.Fatal(err)
	}
	if got := d.answers(); len(got) != 1 || got[0].Text != "main" || got[0].Kind != KindQuestion {
		t.Fatalf("delivered %+v", got)
	}
	_, err = r.Answer(ann, k, Answer{Kind: KindQuestion, Text: "again"})
	wantErrno(t, "second answer", err, syscall.EALREADY)
}

func TestAddRefusals(t *testing.T) {
	r := New(Config{})
	var d deliveries
	mustAdd(t, r, approval(ann, "run-a", "c1", epoch), hour, &d)
	wantErrno(t, "second call of a run", r.Add(approval(ann, "run-a", "c2", epoch), hour, d.deliver), syscall.EBUSY)
	wantErrno(t, "the run with another owner", r.Add(approval(bob, "run-a", "c2", epoch), hour, d.deliver), syscall.EINVAL)
	if _, err := r.Answer(ann, Key{"run-a", "c1"}, approve); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "an answered call again", r.Add(approval(ann, "run-a", "c1", epoch), hour, d.deliver), syscall.EALREADY)
	mustAdd(t, r, approval(ann, "run-a", "c2", epoch), hour, &d) // the run's next call
	for _, c := range []Call{
		{Key: Key{"run-b", "c1"}, Owner: ann, Kind: "vote"},
		{Key: Key{"run-b", ""}, Owner: ann, Kind: KindApproval},
		{Key: Key{"run-b", string(make([]byte, MaxCallIDBytes+1))}, Owner: ann, Kind: KindApproval},
	} {
		wantErrno(t, fmt.Sprintf("Add(%+v)", c.Key), r.Add(c, hour, d.deliver), syscall.EINVAL)
	}
	wantErrno(t, "no Deliver", r.Add(approval(ann, "run-b", "c1", epoch), hour, nil), syscall.EINVAL)
}

// Each uid may have Config.PerUid calls waiting (EAGAIN beyond, and the
// refused call is not listed); others are not held back by it; an answer
// makes room; root is not counted.
func TestPerUidBound(t *testing.T) {
	r := New(Config{PerUid: 3, Total: 100})
	var d deliveries
	for i := range 3 {
		mustAdd(t, r, approval(ann, fmt.Sprintf("run-%d", i), "c", epoch), hour, &d)
	}
	wantErrno(t, "one over the bound", r.Add(approval(ann, "run-3", "c", epoch), hour, d.deliver), syscall.EAGAIN)
	if n := len(r.List(ann, Place{})); n != 3 {
		t.Fatalf("listed %d, want 3", n)
	}
	if _, ok := r.Waiting("run-3"); ok {
		t.Fatal("the refused call waits")
	}
	mustAdd(t, r, approval(bob, "run-bob", "c", epoch), hour, &d)
	if _, err := r.Answer(ann, Key{"run-0", "c"}, approve); err != nil {
		t.Fatal(err)
	}
	mustAdd(t, r, approval(ann, "run-3", "c", epoch), hour, &d)
	if _, ok := r.Remove("run-1"); !ok {
		t.Fatal("Remove found no call waiting")
	}
	mustAdd(t, r, approval(ann, "run-4", "c", epoch), hour, &d)
	for i := range 5 {
		mustAdd(t, r, approval(0, fmt.Sprintf("root-%d", i), "c", epoch), hour, &d)
	}
}

func TestTotalBound(t *testing.T) {
	r := New(Config{PerUid: 2, Total: 3})
	var d deliveries
	for i := range 3 {
		mustAdd(t, r, approval(ann+uint32(i), fmt.Sprintf("run-%d", i), "c", epoch), hour, &d)
	}
	wantErrno(t, "over the total", r.Add(approval(2000, "run-x", "c", epoch), hour, d.deliver), syscall.EAGAIN)
}

// List: only the caller's calls, oldest first, filtered by place.
func TestListSortedAndFiltered(t *testing.T) {
	r := New(Config{})
	var d deliveries
	other := Place{Agent: "writer", Session: "s2", Scope: "shared", Space: "team"}
	mustAdd(t, r, approval(ann, "run-3", "c", epoch.Add(3*time.Second)), hour, &d)
	mustAdd(t, r, approval(ann, "run-1", "c", epoch.Add(1*time.Second)), hour, &d)
	c := approval(ann, "run-2", "c", epoch.Add(2*time.Second))
	c.Place = other
	mustAdd(t, r, c, hour, &d)
	mustAdd(t, r, approval(bob, "run-0", "c", epoch), hour, &d)

	var runs []string
	for _, c := range r.List(ann, Place{}) {
		runs = append(runs, c.Run)
	}
	if fmt.Sprint(runs) != "[run-1 run-2 run-3]" {
		t.Fatalf("ann lists %v", runs)
	}
	if got := r.List(ann, Place{Agent: "writer"}); len(got) != 1 || got[0].Run != "run-2" || got[0].Space != "team" {
		t.Fatalf("filtered by agent: %+v", got)
	}
	if got := r.List(ann, Place{Agent: "coder", Session: "default"}); len(got) != 2 {
		t.Fatalf("filtered by session: %+v", got)
	}
	if got := r.List(bob, Place{}); len(got) != 1 || got[0].Run != "run-0" {
		t.Fatalf("bob lists %+v", got)
	}
	if got := r.List(1003, Place{}); len(got) != 0 {
		t.Fatalf("a uid with nothing lists %+v", got)
	}
	if got := r.InSession(place); len(got) != 3 || got[0].Run != "run-0" {
		t.Fatalf("InSession: %+v", got)
	}
	if got := r.List(ann, Place{})[0]; !got.Deadline.Equal(got.Since.Add(hour)) {
		t.Fatalf("deadline %v, since %v", got.Deadline, got.Since)
	}
}

// A call re-added after a restart keeps its original since: a deadline
// already past is answered deny "timeout" at once, once, and a person's
// answer after it is EALREADY.
func TestTimeoutOfPastDeadline(t *testing.T) {
	r := New(Config{})
	var d deliveries
	k := Key{"run-a", "c1"}
	mustAdd(t, r, approval(ann, k.Run, k.Call, time.Now().Add(-2*hour)), hour, &d)
	a := waitDelivered(t, &d, 1)[0]
	if a.Decision != proto.DecisionDeny || a.Reason != ReasonTimeout || !a.Timeout || a.Uid != 0 {
		t.Fatalf("timeout delivered %+v", a)
	}
	_, err := r.Answer(ann, k, approve)
	wantErrno(t, "an answer after the timeout", err, syscall.EALREADY)
	if len(r.List(ann, Place{})) != 0 {
		t.Fatal("a timed-out call is still listed")
	}
	// A question times out the same way.
	q := Call{Key: Key{"run-q", "ask"}, Place: place, Owner: ann, Kind: KindQuestion, Text: "?", Since: time.Now()}
	mustAdd(t, r, q, 10*time.Millisecond, &d)
	a = waitDelivered(t, &d, 2)[1]
	if a.Kind != KindQuestion || !a.Timeout || a.Reason != ReasonTimeout {
		t.Fatalf("question timeout delivered %+v", a)
	}
}

// waitDelivered waits until d has n answers (bounded) and returns them.
func waitDelivered(t *testing.T, d *deliveries, n int) []Answer {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if got := d.answers(); len(got) >= n {
			return got
		}
	}
	t.Fatalf("%d answers delivered, want %d", len(d.answers()), n)
	return nil
}

// An answer racing the timer: exactly one delivery; the answer either won
// (nil) or lost to the timeout (EALREADY), never both nor neither.
func TestAnswerRacesTimeout(t *testing.T) {
	r := New(Config{})
	var won, lost atomic.Int32
	for i := range 300 {
		var d deliveries
		k := Key{fmt.Sprintf("run-%d", i), "c"}
		// Deadlines from just past to just ahead of the answer.
		mustAdd(t, r, approval(ann, k.Run, k.Call, time.Now()), time.Duration(i%4-1)*50*time.Microsecond, &d)
		time.Sleep(50 * time.Microsecond)
		_, err := r.Answer(ann, k, approve)
		switch {
		case err == nil:
			won.Add(1)
		case abi.Errno(err) == syscall.EALREADY:
			lost.Add(1)
		default:
			t.Fatalf("answer %d: %v", i, err)
		}
		waitDelivered(t, &d, 1)
		time.Sleep(100 * time.Microsecond) // a second delivery would come now
		if got := d.answers(); len(got) != 1 || got[0].Timeout == (err == nil) {
			t.Fatalf("race %d: answer %v, delivered %+v", i, err, got)
		}
		r.Remove(k.Run)
	}
	t.Logf("answer won %d, timeout won %d", won.Load(), lost.Load())
}

// Many answerers of one call at once: one delivery, the others EALREADY.
func TestConcurrentAnswers(t *testing.T) {
	r := New(Config{})
	var d deliveries
	k := Key{"run-a", "c1"}
	mustAdd(t, r, approval(ann, k.Run, k.Call, epoch), hour, &d)
	var ok, already atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_, err := r.Answer(ann, k, approve)
			switch abi.Errno(err) {
			case 0:
				ok.Add(1)
			case syscall.EALREADY:
				already.Add(1)
			default:
				t.Errorf("answer: %v", err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || already.Load() != 15 || len(d.answers()) != 1 {
		t.Fatalf("ok %d, EALREADY %d, delivered %d", ok.Load(), already.Load(), len(d.answers()))
	}
}

// A removed run's call is never answered: not by a person (ENOENT), not
// by its timer.
func TestRemoveStopsTimer(t *testing.T) {
	r := New(Config{})
	var d deliveries
	k := Key{"run-a", "c1"}
	mustAdd(t, r, approval(ann, k.Run, k.Call, time.Now()), 5*time.Millisecond, &d)
	if c, ok := r.Remove(k.Run); !ok || c.Key != k {
		t.Fatalf("Remove: %+v %v", c, ok)
	}
	time.Sleep(30 * time.Millisecond)
	if len(d.answers()) != 0 {
		t.Fatalf("a removed call was delivered: %+v", d.answers())
	}
	_, err := r.Answer(ann, k, approve)
	wantErrno(t, "answer after Remove", err, syscall.ENOENT)
	if _, ok := r.Remove(k.Run); ok {
		t.Fatal("second Remove found a call")
	}
}

// Answers the engine found in the log are EALREADY (EACCES for others).
func TestMarkAnswered(t *testing.T) {
	r := New(Config{})
	k := Key{"run-a", "c1"}
	if err := r.MarkAnswered(ann, k); err != nil {
		t.Fatal(err)
	}
	_, err := r.Answer(ann, k, approve)
	wantErrno(t, "answered in the log", err, syscall.EALREADY)
	_, err = r.Answer(bob, k, approve)
	wantErrno(t, "by another uid", err, syscall.EACCES)
	wantErrno(t, "another owner", r.MarkAnswered(bob, k), syscall.EINVAL)
	var d deliveries
	wantErrno(t, "Add of it", r.Add(approval(ann, k.Run, k.Call, epoch), hour, d.deliver), syscall.EALREADY)
}

// The memory of answers is bounded: per run (the oldest answer is
// forgotten: ENOENT), and per uid (the run idle longest is forgotten).
func TestAnswerMemoryBounded(t *testing.T) {
	r := New(Config{PerUid: 2})
	for i := range answeredPerRun + 1 {
		if err := r.MarkAnswered(ann, Key{"run-a", fmt.Sprint("c", i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := r.Answer(ann, Key{"run-a", "c0"}, approve)
	wantErrno(t, "the oldest answer", err, syscall.ENOENT)
	_, err = r.Answer(ann, Key{"run-a", fmt.Sprint("c", answeredPerRun)}, approve)
	wantErrno(t, "the newest answer", err, syscall.EALREADY)

	var d deliveries
	mustAdd(t, r, approval(ann, "run-waits", "c", epoch), hour, &d)
	for i := range 100 {
		r.MarkAnswered(ann, Key{fmt.Sprint("run-", i), "c"})
	}
	r.mu.Lock()
	remembered := len(r.byOwner[ann])
	r.mu.Unlock()
	if remembered > r.rememberPerUid {
		t.Fatalf("ann has %d runs remembered, bound %d", remembered, r.rememberPerUid)
	}
	if _, ok := r.Waiting("run-waits"); !ok {
		t.Fatal("a waiting call was forgotten to make room")
	}
}

// Deliver's error is Answer's; the call stays answered.
func TestDeliverError(t *testing.T) {
	r := New(Config{})
	k := Key{"run-a", "c1"}
	boom := abi.Errorf(syscall.EIO, "record", "disk gone")
	if err := r.Add(approval(ann, k.Run, k.Call, epoch), hour, func(Call, Answer) (*proto.Object, error) { return nil, boom }); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Answer(ann, k, approve); !errors.Is(err, boom) {
		t.Fatalf("answer: %v", err)
	}
	_, err := r.Answer(ann, k, approve)
	wantErrno(t, "second answer", err, syscall.EALREADY)
}

// ctx agent pending over 10,000 sessions with 100 waiting calls of the
// caller: List reads only the caller's runs.
func BenchmarkList(b *testing.B) {
	r := New(Config{PerUid: 128, Total: 20000})
	noop := func(Call, Answer) (*proto.Object, error) { return nil, nil }
	for i := range 10000 {
		owner := 2000 + uint32(i%1000)
		if i < 100 {
			owner = ann
		}
		c := approval(owner, fmt.Sprint("run-", i), "c", epoch.Add(time.Duration(i)))
		c.Session = fmt.Sprint("s", i)
		if err := r.Add(c, hour, noop); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if n := len(r.List(ann, Place{Agent: "coder"})); n != 100 {
			b.Fatal(n)
		}
	}
}
