package session

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
)

// Quota bounds one kind of thing users make the server hold (socket
// connections, files open through the mount, runs): at most perUid for any
// one uid and at most total for all uids together, so that no user can
// take what others need, and all of them together cannot take the
// descriptors the mount and root need. Root is not counted: it is the
// reserve, and it could take the machine down anyway. A refusal is an
// immediate error with the quota's errno, never a wait.
type Quota struct {
	what          string        // "connections", for the refusal
	errno         syscall.Errno // EAGAIN or EMFILE
	perUid, total int

	mu   sync.Mutex
	held map[uint32]int
	sum  int
}

func newQuota(what string, errno syscall.Errno, perUid, total int) *Quota {
	return &Quota{what: what, errno: errno, perUid: perUid, total: total, held: map[uint32]int{}}
}

// Take holds one for uid, or refuses.
func (q *Quota) Take(uid uint32) error { return q.TakeN(uid, 1) }

// Give gives back one that Take held for uid.
func (q *Quota) Give(uid uint32) { q.GiveN(uid, 1) }

// TakeN holds n more for uid (bytes, for a quota of bytes), or refuses
// and holds nothing.
func (q *Quota) TakeN(uid uint32, n int) error {
	if uid == 0 || n <= 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.held[uid]+n > q.perUid:
		return abi.Errorf(q.errno, "", "uid %d holds %d %s, and %d more is over the most one uid may", uid, q.held[uid], q.what, n)
	case q.sum+n > q.total:
		return abi.Errorf(q.errno, "", "the server holds %d %s for users, the most it may", q.sum, q.what)
	}
	q.held[uid] += n
	q.sum += n
	return nil
}

// GiveN gives back n that TakeN held for uid.
func (q *Quota) GiveN(uid uint32, n int) {
	if uid == 0 || n <= 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(n, q.held[uid])
	q.held[uid] -= n
	q.sum -= n
	if q.held[uid] == 0 {
		delete(q.held, uid)
	}
}

// Limits are the quotas of one engine, made from the descriptor limit:
// of N descriptors, sessions take at most N/4 (SessionBudget), users'
// open files through the mount N/4, their connections N/8, their runs
// (three pipes each) N/8; what is left is root's and the server's own.
type Limits struct {
	Conns   *Quota // socket connections open at once (EAGAIN)
	Handles *Quota // files open through the mount (EMFILE)
	Runs    *Quota // runs queued or running (EAGAIN)

	// Free bounds the bytes and inodes each uid keeps in the free trees
	// (EDQUOT; freequota.go).
	Free *FreeQuota

	// Searches (issue 19, finding 9; searchpace.go): what searching may
	// make the server spend. Searches holds the searches of each uid under
	// way (EAGAIN beyond, at once; its total bounds those waiting for a
	// scan slot); ScanSlots is how many searches scan at once server-wide,
	// the rest waiting their turn; ScanBytes is how many bytes of
	// messages.jsonl one search may read, to index or to verify, before its
	// reply is cut and says so.
	Searches  *Quota
	ScanSlots *scanGate
	ScanBytes int64

	// What a writer through the mount makes the server hold between its
	// writes (issue 19, findings 11 and 12): the bytes of unfinished ctl
	// requests and unfinished log lines, together, per uid (EAGAIN at the
	// write that would pass it, which keeps nothing). A ctl request must
	// also be whole within RequestDeadline.
	Partial *Quota
}

// RequestDeadline is how long a request may take to arrive whole, from
// its first byte on a ctl file (then ETIMEDOUT, and its bytes are
// freed), as from a socket connection's start.
const RequestDeadline = 10 * time.Second

// Default bounds of Limits.Partial: one uid may hold 16 partial lines or
// requests of the largest size (1 MiB), and all users together 16 times
// that.
const (
	partialBytesPerUid = 16 << 20
	partialBytesTotal  = 16 * partialBytesPerUid
)

// LimitConfig overrides the per-uid bounds (0: the default).
type LimitConfig struct {
	ConnsPerUid, HandlesPerUid, RunsPerUid int

	// The free trees' quota per uid (freebytes=N, freeinodes=N).
	FreeBytesPerUid, FreeInodesPerUid int64

	// Searches (see Limits.Searches): CTXFS_LIMITS searches=N (per uid),
	// search_slots=N (server-wide) and search_scan=BYTES (per search).
	SearchesPerUid, SearchSlots int
	SearchScanBytes             int64
}

// The free trees' default quota per uid: room for a toolchain and a
// project in root/, and a bound that one user's walk at start-up and one
// user's disk use both stay within.
const (
	defaultFreeBytes  = 4 << 30
	defaultFreeInodes = 200_000
)

// LimitsFromEnv reads per-uid bounds from CTXFS_LIMITS, a comma-separated
// list of conns=N, open=N, runs=N, freebytes=N, freeinodes=N and the
// search bounds (searchLimitNames) (what an operator, or a test, sets for
// the server); anything it does not name keeps its default.
func LimitsFromEnv(getenv func(string) string) (LimitConfig, error) {
	var c LimitConfig
	spec := getenv("CTXFS_LIMITS")
	if spec == "" {
		return c, nil
	}
	for _, kv := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return c, fmt.Errorf("CTXFS_LIMITS: %q is not NAME=N with N > 0", kv)
		}
		switch k {
		case "conns":
			c.ConnsPerUid = n
		case "open":
			c.HandlesPerUid = n
		case "runs":
			c.RunsPerUid = n
		case "freebytes":
			c.FreeBytesPerUid = int64(n)
		case "freeinodes":
			c.FreeInodesPerUid = int64(n)
		default:
			if !c.setSearchLimit(k, n) {
				return c, fmt.Errorf("CTXFS_LIMITS: unknown bound %q (conns, open, runs, freebytes, freeinodes, %s)", k, searchLimitNames)
			}
		}
	}
	return c, nil
}

func newLimits(c LimitConfig) *Limits {
	n := 1024
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		n = int(rl.Cur)
	}
	or := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	l := &Limits{
		Conns:   newQuota("connections", syscall.EAGAIN, or(c.ConnsPerUid, 64), max(n/8, 16)),
		Handles: newQuota("open files", syscall.EMFILE, or(c.HandlesPerUid, min(1024, max(n/16, 16))), max(n/4, 16)),
		Runs:    newQuota("runs", syscall.EAGAIN, or(c.RunsPerUid, 32), max(n/8/3, 8)),

		Partial: newQuota("bytes of unfinished requests and lines", syscall.EAGAIN, partialBytesPerUid, partialBytesTotal),

		Free: newFreeQuota(int64(or(int(c.FreeBytesPerUid), defaultFreeBytes)), int64(or(int(c.FreeInodesPerUid), defaultFreeInodes)), nil),
	}
	l.setSearchLimits(c)
	return l
}

// Limits are the engine's quotas, for its transports (connections,
// handles) and itself (runs).
func (e *Engine) Limits() *Limits { return e.limits }

// runTicket is a place in a caller's quota of runs, taken before anything
// of a send is written: spent when a run starts (the run gives it back
// when it is forgotten), else cancelled.
type runTicket struct {
	q    *Quota
	uid  uint32
	held bool
}

func (e *Engine) takeRun(uid uint32) (*runTicket, error) {
	if err := e.limits.Runs.Take(uid); err != nil {
		return nil, err
	}
	return &runTicket{q: e.limits.Runs, uid: uid, held: true}, nil
}

// spend hands the place to a run that started.
func (t *runTicket) spend() { t.held = false }

// cancel gives the place back unless a run holds it. Nil-safe.
func (t *runTicket) cancel() {
	if t != nil && t.held {
		t.q.Give(t.uid)
		t.held = false
	}
}
