package integration

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkChildFanOut: a program parent starts 3 children (echo agents,
// which answer at once) through its control socket, against the same
// three runs sent directly to the agent's socket at once (SPEC 18). Each
// side reports create-to-done-ms: the mean time from a run's start (for a
// child, the parent's agent.create accepted) to its done, from the ts of
// the runs' own start and done events; ns/op is the whole round (for the
// parent, its program's start and the children's files through the mount
// included).
func BenchmarkChildFanOut(b *testing.B) {
	requireFUSE(b)
	s := newServerWith(b, func(s *server) {
		s.define("boss", map[string]string{"abi": "text\n", "program": bossProgram, "env": "GATE=/nonexistent\n"})
		s.define("echoer", map[string]string{"model": "debug/echo"})
	})
	b.Run("children", func(b *testing.B) {
		var sessions []string
		for i := 0; i < b.N; i++ {
			session := fmt.Sprintf("f%d-%d", i, time.Now().UnixNano())
			frames, raw, err := s.requestAsWithin(owner, "boss", fmt.Sprintf(`{"op":"send","id":"b","session":%q,"input":"echoer a\nechoer b\nechoer c"}`, session), time.Minute)
			if d := lastDone(frames); err != nil || d == nil || d["status"] != "ok" {
				b.Fatalf("parent: %v %s", err, raw)
			}
			var kids []string
			eventually(b, time.Minute, "three children done", func() bool {
				kids = s.children("boss", session)
				for _, k := range kids {
					if s.childFile("boss", session, k, "status") != "done\n" {
						return false
					}
				}
				return len(kids) == 3
			})
			for _, k := range kids {
				sessions = append(sessions, strings.TrimSpace(s.childFile("boss", session, k, "session")))
			}
		}
		b.StopTimer()
		b.ReportMetric(meanRunMs(b, s, sessions), "create-to-done-ms")
	})
	b.Run("direct", func(b *testing.B) {
		var sessions []string
		for i := 0; i < b.N; i++ {
			var wg sync.WaitGroup
			for j, in := range []string{"a", "b", "c"} {
				session := fmt.Sprintf("d%d-%d-%d", i, j, time.Now().UnixNano())
				sessions = append(sessions, session)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, raw, err := s.requestAsWithin(owner, "echoer", fmt.Sprintf(`{"op":"send","id":"d","session":%q,"input":%q}`, session, in), time.Minute); err != nil {
						b.Errorf("send: %v %s", err, raw)
					}
				}()
			}
			wg.Wait()
		}
		b.StopTimer()
		b.ReportMetric(meanRunMs(b, s, sessions), "create-to-done-ms")
	})
}

// meanRunMs is the mean time from start to done of the one run of each
// of uid 1001's echoer sessions, from their events' ts.
func meanRunMs(b *testing.B, s *server, sessions []string) float64 {
	var total time.Duration
	for _, name := range sessions {
		var start, done time.Time
		for _, line := range strings.Split(fileBytes(b, filepath.Join(s.sessionDir(1001, "echoer", name), "events.jsonl")), "\n") {
			var f frame
			if json.Unmarshal([]byte(line), &f) != nil {
				continue
			}
			ts, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(f["ts"]))
			switch f["type"] {
			case "start":
				start = ts
			case "done":
				done = ts
			}
		}
		total += done.Sub(start)
	}
	return float64(total.Microseconds()) / 1000 / float64(max(len(sessions), 1))
}
