package quota

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestQuotaOfBytes: TakeN holds n for a uid only when the uid's share
// and the total both take it, and holds nothing when refused; GiveN
// gives back at most what is held; root is never counted.
func TestQuotaOfBytes(t *testing.T) {
	q := New("bytes", syscall.EAGAIN, 10, 15)
	for _, step := range []struct {
		uid  uint32
		n    int
		fail bool
	}{
		{1001, 6, false}, {1001, 5, true}, {1001, 4, false}, {1002, 6, true}, {1002, 5, false}, {0, 1 << 30, false},
	} {
		err := q.TakeN(step.uid, step.n)
		if step.fail != (err != nil) || (err != nil && !errors.Is(err, syscall.EAGAIN)) {
			t.Fatalf("TakeN(%d, %d): %v", step.uid, step.n, err)
		}
	}
	if q.held[1001] != 10 || q.held[1002] != 5 || q.sum != 15 {
		t.Fatalf("held %v, sum %d", q.held, q.sum)
	}
	q.GiveN(1001, 4)
	q.GiveN(1002, 50)
	if q.held[1001] != 6 || q.held[1002] != 0 || q.sum != 6 {
		t.Fatalf("after giving back: held %v, sum %d", q.held, q.sum)
	}
	if err := q.TakeN(1002, 9); err != nil {
		t.Fatalf("the total's room again: %v", err)
	}
}

// TestSearchLimitsFromEnv: the search bounds are read from CTXFS_LIMITS.
func TestSearchLimitsFromEnv(t *testing.T) {
	c, err := FromEnv(func(string) string { return "searches=3,search_slots=4,search_scan=1048576" })
	if err != nil || c.SearchesPerUid != 3 || c.SearchSlots != 4 || c.SearchScanBytes != 1<<20 {
		t.Fatalf("%+v %v", c, err)
	}
	l := NewLimits(c)
	if l.Searches.perUid != 3 || cap(l.ScanSlots.slots) != 4 || l.ScanBytes != 1<<20 {
		t.Fatalf("limits %+v", l)
	}
	if _, err := FromEnv(func(string) string { return "search_bytes=1" }); err == nil || !strings.Contains(err.Error(), "search_scan") {
		t.Fatalf("an unknown name: %v", err)
	}
}

// TestVersionBytesFromEnv: a session's file versions are bounded by
// CTXFS_LIMITS versions=BYTES, else by the default.
func TestVersionBytesFromEnv(t *testing.T) {
	c, err := FromEnv(func(string) string { return "versions=4096" })
	if err != nil || c.VersionBytes != 4096 || NewLimits(c).VersionBytes != 4096 {
		t.Fatalf("%+v %v", c, err)
	}
	if l := NewLimits(LimitConfig{}); l.VersionBytes != DefaultVersionBytes {
		t.Fatalf("default %d", l.VersionBytes)
	}
}

// TestTempLimitsFromEnv: the temp sessions' bounds are read from
// CTXFS_LIMITS (temps=N, temp_bytes=BYTES, temp_idle=SECONDS), else are
// the defaults.
func TestTempLimitsFromEnv(t *testing.T) {
	c, err := FromEnv(func(string) string { return "temps=3,temp_bytes=4096,temp_idle=5" })
	if err != nil {
		t.Fatal(err)
	}
	if l := NewLimits(c); l.TempSessions != 3 || l.TempBytes != 4096 || l.TempIdle != 5*time.Second {
		t.Fatalf("limits %d %d %s", l.TempSessions, l.TempBytes, l.TempIdle)
	}
	if l := NewLimits(LimitConfig{}); l.TempSessions != defaultTempSessions || l.TempBytes != defaultTempBytes || l.TempIdle != defaultTempIdle {
		t.Fatalf("defaults %d %d %s", l.TempSessions, l.TempBytes, l.TempIdle)
	}
}

// TestNames: a home's names are counted once, at their first Take; a
// Take past the bound is EDQUOT and charges nothing; Give gives back; a
// home not counted yet is left to its count; each home has its own count;
// CTXFS_LIMITS names=N sets the bound, else the default.
func TestNames(t *testing.T) {
	counted := 0
	q := NewNames("names", 5, func(home string) int64 { counted++; return 3 })
	q.Give("home/1001", 1) // not counted yet: left to the count
	if err := q.Take("home/1001", 2); err != nil {
		t.Fatal(err)
	}
	if err := q.Take("home/1001", 1); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("past the bound: %v, want EDQUOT", err)
	}
	q.Give("home/1001", 1)
	if err := q.Take("home/1001", 1); err != nil || q.Held("home/1001") != 5 || counted != 1 {
		t.Fatalf("after a give-back: %v, held %d, counted %d times", err, q.Held("home/1001"), counted)
	}
	if err := q.Room("home/1001", 1); !errors.Is(err, syscall.EDQUOT) || q.Held("home/1001") != 5 {
		t.Fatalf("room past the bound: %v, held %d", err, q.Held("home/1001"))
	}
	if err := q.Take("shared/team", 2); err != nil || q.Held("shared/team") != 5 || counted != 2 {
		t.Fatalf("another home: %v, held %d, counted %d times", err, q.Held("shared/team"), counted)
	}
	if err := q.Room("shared/team", 0); err != nil {
		t.Fatalf("room for nothing: %v", err)
	}
	c, err := FromEnv(func(string) string { return "names=7,agents=2" })
	if err != nil || NewLimits(c).Names.perHome != 7 || NewLimits(c).Agents.perHome != 2 {
		t.Fatalf("%+v %v", c, err)
	}
	if l := NewLimits(LimitConfig{}); l.Names.perHome != defaultNames || l.Agents.perHome != defaultAgents {
		t.Fatalf("defaults %d %d", l.Names.perHome, l.Agents.perHome)
	}
}

// TestHistory: a home's or a space's bytes of history are counted once,
// at their first charge, each key its own; a Take past the bound is
// EDQUOT and charges nothing, an Owe charges past it; Give gives back,
// nothing before the count; CTXFS_LIMITS logbytes=N sets the bound, else
// the default.
func TestHistory(t *testing.T) {
	counted := map[string]int{}
	q := NewHistory(100, func(home string) int64 { counted[home]++; return 60 })
	c := q.Of("shared/team")
	c.Give(10) // not counted yet: left to the count
	if err := c.Take(40); err != nil {
		t.Fatal(err)
	}
	if err := c.Take(1); !errors.Is(err, syscall.EDQUOT) || q.Held("shared/team") != 100 {
		t.Fatalf("past the bound: %v, held %d, want EDQUOT and 100", err, q.Held("shared/team"))
	}
	c.Owe(5)
	c.Give(25)
	if err := q.Of("shared/team").Take(20); err != nil || q.Held("shared/team") != 100 || counted["shared/team"] != 1 {
		t.Fatalf("after a give-back: %v, held %d, counted %d times", err, q.Held("shared/team"), counted["shared/team"])
	}
	if err := q.Of("home/1001").Take(40); err != nil || q.Held("home/1001") != 100 {
		t.Fatalf("another home: %v, held %d, want its own count", err, q.Held("home/1001"))
	}
	// Room looks and charges nothing, counting a home first as Take does.
	if err := q.Room("home/1002", 40); err != nil || q.Held("home/1002") != 60 {
		t.Fatalf("room for 40: %v, held %d, want nil and 60", err, q.Held("home/1002"))
	}
	if err := q.Room("home/1002", 41); !errors.Is(err, syscall.EDQUOT) || q.Held("home/1002") != 60 {
		t.Fatalf("room for 41: %v, held %d, want EDQUOT and 60", err, q.Held("home/1002"))
	}
	lc, err := FromEnv(func(string) string { return "logbytes=7" })
	if err != nil || NewLimits(lc).History.perHome != 7 {
		t.Fatalf("%+v %v", lc, err)
	}
	if l := NewLimits(LimitConfig{}); l.History.perHome != defaultLogBytes {
		t.Fatalf("default %d", l.History.perHome)
	}
}

// BenchmarkHistoryTake is the charge of one append to its session's home
// (sealedlog's takeUnit), with a hundred homes counted.
func BenchmarkHistoryTake(b *testing.B) {
	q := NewHistory(1<<62, func(string) int64 { return 0 })
	for i := range 100 {
		q.Held(fmt.Sprintf("home/%d", 1000+i))
	}
	c := q.Of("home/1001")
	b.ReportAllocs()
	for range b.N {
		if err := c.Take(1); err != nil {
			b.Fatal(err)
		}
	}
}
