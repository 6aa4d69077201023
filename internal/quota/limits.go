package quota

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits are the quotas of one engine, made from the descriptor limit:
// of N descriptors, sessions take at most N/4 (SessionBudget), users'
// open files through the mount N/4, their connections N/8, their runs
// (three pipes each) N/8; what is left is root's and the server's own.
type Limits struct {
	Conns   *Quota // socket connections open at once (EAGAIN)
	Handles *Quota // files open through the mount (EMFILE)
	Runs    *Quota // runs queued or running (EAGAIN)

	// Free bounds the bytes and inodes each uid keeps in the free trees
	// (EDQUOT; free.go).
	Free *FreeQuota

	// Names bounds the sessions and index entries each home (a uid's)
	// and each shared space keeps in the indexes, which stay in memory
	// once loaded (EDQUOT; names.go), and Agents the agents and models
	// made in it, each a container whose index, once used, does too.
	Names, Agents *Names

	// History bounds the bytes of history (logs, file versions) each
	// home (a uid's) and each shared space holds in the store (EDQUOT;
	// history.go).
	History *History

	// Searches (issue 19, finding 9; gate.go): what searching may
	// make the server spend. Searches holds the searches of each uid under
	// way (EAGAIN beyond, at once; its total bounds those waiting for a
	// scan slot); ScanSlots is how many searches scan at once server-wide,
	// the rest waiting their turn; ScanBytes is how many bytes of
	// messages.jsonl one search may read, to index or to verify, before its
	// reply is cut and says so.
	Searches  *Quota
	ScanSlots *ScanGate
	ScanBytes int64

	// VersionBytes bounds what one session's file versions hold, its
	// kept contents and their index (SPEC 17; EDQUOT at the Keep that
	// would pass it, which writes nothing; session/versions).
	VersionBytes int64

	// Temp sessions (SPEC 8: memory only; session/temp.go): how many one
	// uid may hold, and the bytes their logs may hold together (EAGAIN at
	// the send that would pass either, which writes nothing), and how long
	// one is kept once it has no run and nobody asked for it.
	TempSessions int
	TempBytes    int64
	TempIdle     time.Duration

	// What a user's open files through the mount make the server hold
	// between its calls (issue 19, findings 11 and 12): the bytes of
	// unfinished ctl requests, log lines and values, and the copies and
	// listings a reader's handle holds (a file's copy taken at open, a
	// directory's listing, a ctl frame read in part), together, per uid
	// (EAGAIN at the call that would pass it, which keeps nothing). A ctl
	// request must also be whole within RequestDeadline.
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

	// The sessions and index entries one uid's home, or one shared
	// space, may keep (names=N), and the agents and models made in it
	// (agents=N).
	NamesPerUid, AgentsPerUid int64

	// The bytes of history one uid's home, or one shared space, may hold
	// (logbytes=N).
	LogBytesPerUid int64

	// Searches (see Limits.Searches): CTXFS_LIMITS searches=N (per uid),
	// search_slots=N (server-wide) and search_scan=BYTES (per search).
	SearchesPerUid, SearchSlots int
	SearchScanBytes             int64

	// WaitingPerUid bounds the calls one uid may have waiting for a
	// person (SPEC 17, session/waiting): CTXFS_LIMITS waiting=N.
	WaitingPerUid int
	// The file versions one session may hold (versions=BYTES).
	VersionBytes int64

	// Temp sessions (see Limits.TempSessions): CTXFS_LIMITS temps=N and
	// temp_bytes=BYTES (per uid), temp_idle=SECONDS.
	TempSessionsPerUid int
	TempBytesPerUid    int64
	TempIdle           time.Duration
}

// DefaultVersionBytes is Limits.VersionBytes unless CTXFS_LIMITS sets it.
const DefaultVersionBytes = 64 << 20

// The temp sessions' defaults: a uid's scripts may keep a few dozen
// conversations of ordinary size at once, for long enough to ask for
// their status, follow their events or retry a send after a run.
const (
	defaultTempSessions = 64
	defaultTempBytes    = 64 << 20
	defaultTempIdle     = 10 * time.Minute
)

// The free trees' default quota per uid: room for a toolchain and a
// project in root/, and a bound that one user's walk at start-up and one
// user's disk use both stay within.
const (
	defaultFreeBytes  = 4 << 30
	defaultFreeInodes = 200_000
)

// defaultNames is Limits.Names's bound per home or space: as many
// sessions as the index is made to serve at the cost of 10 (100,000;
// BenchmarkSendLatency), about 100 MiB of memory at most per home.
const defaultNames = 100_000

// defaultAgents is Limits.Agents's bound per home or space: an agent
// whose index is in use costs about 10 KiB (4,000 made and listed as uid
// 1001 kept the server 38 MB larger), so 1,000 cost at most about 10 MiB.
const defaultAgents = 1000

// defaultLogBytes is Limits.History's bound per home or space: 16 GiB, four times
// the free trees' 4 GiB. A long session's logs are a few MiB (a model's
// replies and tool outputs, each line at most 1 MiB), so this is room for
// thousands of them and for their versions (64 MiB at most a session),
// while a user who fills it stops at a size an operator can plan a
// store's disk for.
const defaultLogBytes = 16 << 30

// limitNames are the names CTXFS_LIMITS knows.
const limitNames = "conns, open, runs, freebytes, freeinodes, names, agents, logbytes, searches, search_slots, search_scan, waiting, versions, temps, temp_bytes, temp_idle"

// FromEnv reads per-uid bounds from CTXFS_LIMITS, a comma-separated
// list of NAME=N for the names of limitNames (what an operator, or a
// test, sets for the server); anything it does not name keeps its
// default.
func FromEnv(getenv func(string) string) (LimitConfig, error) {
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
		case "names":
			c.NamesPerUid = int64(n)
		case "agents":
			c.AgentsPerUid = int64(n)
		case "logbytes":
			c.LogBytesPerUid = int64(n)
		case "searches":
			c.SearchesPerUid = n
		case "search_slots":
			c.SearchSlots = n
		case "search_scan":
			c.SearchScanBytes = int64(n)
		case "waiting":
			c.WaitingPerUid = n
		case "versions":
			c.VersionBytes = int64(n)
		case "temps":
			c.TempSessionsPerUid = n
		case "temp_bytes":
			c.TempBytesPerUid = int64(n)
		case "temp_idle":
			c.TempIdle = time.Duration(n) * time.Second
		default:
			return c, fmt.Errorf("CTXFS_LIMITS: unknown bound %q (%s)", k, limitNames)
		}
	}
	return c, nil
}

// NewLimits makes the quotas of c, the rest from the descriptor limit.
func NewLimits(c LimitConfig) *Limits {
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
		Conns:   New("connections", syscall.EAGAIN, or(c.ConnsPerUid, 64), max(n/8, 16)),
		Handles: New("open files", syscall.EMFILE, or(c.HandlesPerUid, min(1024, max(n/16, 16))), max(n/4, 16)),
		Runs:    New("runs", syscall.EAGAIN, or(c.RunsPerUid, 32), max(n/8/3, 8)),

		Partial: New("bytes of unfinished writes and of readers' copies and listings", syscall.EAGAIN, partialBytesPerUid, partialBytesTotal),

		Free:   NewFreeQuota(int64(or(int(c.FreeBytesPerUid), defaultFreeBytes)), int64(or(int(c.FreeInodesPerUid), defaultFreeInodes)), nil),
		Names:  NewNames("sessions and index entries", int64(or(int(c.NamesPerUid), defaultNames)), nil),
		Agents: NewNames("agents and models", int64(or(int(c.AgentsPerUid), defaultAgents)), nil),

		History: NewHistory(int64(or(int(c.LogBytesPerUid), defaultLogBytes)), nil),
	}
	l.setSearchLimits(c)
	l.VersionBytes = int64(or(int(c.VersionBytes), DefaultVersionBytes))
	l.TempSessions = or(c.TempSessionsPerUid, defaultTempSessions)
	l.TempBytes = int64(or(int(c.TempBytesPerUid), defaultTempBytes))
	l.TempIdle = time.Duration(or(int(c.TempIdle), int(defaultTempIdle)))
	return l
}
