package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// quickProgram is a program that exits at once: a static Go binary, so
// that the same file runs on the host and in a jail that has no libc.
const quickProgram = "package main\n\nfunc main() {}\n"

// buildQuick builds quickProgram into dir and returns its path.
func buildQuick(b *testing.B, dir string) string {
	src := filepath.Join(dir, "quick.go")
	testkit.Must(b, os.WriteFile(src, []byte(quickProgram), 0o644))
	bin := filepath.Join(dir, "quick")
	cmd := goBuild(bin, src)
	cmd.Env = append(cmd.Env, "GOFLAGS=-mod=mod", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the quick program: %v\n%s", err, out)
	}
	return bin
}

// BenchmarkRunStart: the cost of a run of a program that exits at once,
// through send (start recorded, program run, done recorded), without and
// with a chroot jail, against fork/exec/wait of the same binary, side by
// side in one run.
func BenchmarkRunStart(b *testing.B) {
	requireFUSE(b)
	quick := buildQuick(b, b.TempDir())
	prog, err := os.ReadFile(quick)
	testkit.Must(b, err)
	s := newServerWith(b, func(s *server) {
		s.define("quick", map[string]string{"abi": "text", "program": string(prog)})
		s.define("jailed", map[string]string{"abi": "text", "isolation": "chroot", "program": string(prog)})
	})
	testkit.Must(b, os.MkdirAll(s.mnt("home/0/agent/jailed/root"), 0o755))
	n := max(b.N, 50)
	native := perRun(n, func(i int) {
		testkit.Must(b, exec.Command(quick).Run())
	})
	sendTo := func(agent string) time.Duration {
		return perRun(n, func(i int) {
			frames := s.mustRequest(agent, fmt.Sprintf(`{"op":"send","id":"q%d","session":"bench","input":"x"}`, i))
			if last := frames[len(frames)-1]; last["status"] != "ok" {
				b.Fatalf("%s run: %v\n%s", agent, frames, s.logText())
			}
		})
	}
	plain := sendTo("quick")
	jailed := sendTo("jailed")
	b.ReportMetric(us(native), "µs/exec")
	b.ReportMetric(us(plain), "µs/send")
	b.ReportMetric(us(jailed), "µs/send-chroot")
	b.ReportMetric(float64(plain)/float64(native), "send/exec")
	b.ReportMetric(float64(jailed)/float64(native), "chroot/exec")
	b.ReportMetric(float64(jailed-plain)/1e3, "µs-chroot-extra")
}

// perRun is the mean time of n calls of f.
func perRun(n int, f func(i int)) time.Duration {
	t0 := time.Now()
	for i := 0; i < n; i++ {
		f(i)
	}
	return time.Since(t0) / time.Duration(n)
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// BenchmarkFirstDelta: the latency from a send to its first delta frame
// for a model API run, against the fake provider's own latency to its
// first body byte for the same request (a bare HTTP client posting the
// body the runs sent) and against one fdatasync of the store's
// filesystem (a 200-byte append+fdatasync loop on the store's disk for
// 0.3 s before and after the sends, as DurableSends measures it), side by
// side in one run. The aim is added/fdatasync ≤ 1: what ctxfs adds over
// the provider (the durable start, the definition, the conversation, the
// client's own hop) within one sync. to-start and to-request say where
// the time goes: the start frame (durable) at the client, and the request
// at the provider, each after the send; provider-empty is the bare
// client's empty request (the 77 µs); server-CPU-µs/send is the
// server's CPU time per send (every thread), steadier than the latencies
// on a shared machine; the -median rows are the medians of the sends.
//
// The sends start once the definitions are over two seconds old (a
// definition changed more recently is read again at every send:
// agent/def/cache.go's racyWindow, which a server in use does not pay).
// short: sessions of at most firstDeltaTurns sends each, made before the
// timing starts, so that the conversation is as long at every b.N.
// long: one session whose messages.jsonl holds longTurns lines first
// (appended through the mount), a long conversation's prompt.
func BenchmarkFirstDelta(b *testing.B) {
	for _, long := range []bool{false, true} {
		b.Run(map[bool]string{false: "short", true: "long"}[long], func(b *testing.B) {
			benchFirstDelta(b, long)
		})
	}
}

const (
	// firstDeltaTurns is how many sends BenchmarkFirstDelta/short makes
	// to one session.
	firstDeltaTurns = 20
	// longTurns is how many message lines BenchmarkFirstDelta/long's
	// session holds before its sends.
	longTurns = 2000
)

func benchFirstDelta(b *testing.B, long bool) {
	requireFUSE(b)
	var asked atomic.Int64 // when the provider got the last request, UnixNano
	var last atomic.Pointer[[]byte]
	reply := openAIReply("hello there")
	// Not newFakeProvider, which decodes and keeps every body it gets: the
	// provider shares this process, and its CPU with the client's reads.
	p := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Store(time.Now().UnixNano())
		body, _ := io.ReadAll(r.Body)
		last.Store(&body)
		reply(w, r)
	}))
	var conns atomic.Int64 // the connections the provider accepted
	p.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	p.Start()
	defer p.Close()
	s := newModelServer(b, "openai-chat", p.URL+"/v1", nil)
	n := max(b.N, 50)
	sessions := (n + firstDeltaTurns - 1) / firstDeltaTurns
	if long {
		sessions = 1
	}
	for k := range sessions {
		firstDelta(b, s, fmt.Sprintf(`{"op":"send","id":"w%d","session":"bench%d","input":"hi"}`, k, k))
	}
	if long {
		var lines strings.Builder
		for i := range longTurns {
			role := []string{"user", "assistant"}[i%2]
			fmt.Fprintf(&lines, `{"role":%q,"content":"line %d of a long conversation, with some words in it"}`+"\n", role, i)
		}
		testkit.Must(b, appendMnt(s.mnt("home/0/agent/assistant/session/bench0/messages.jsonl"), lines.String()))
		firstDelta(b, s, `{"op":"send","id":"w-long","session":"bench0","input":"hi"}`)
	}
	body := *last.Load()
	time.Sleep(2100 * time.Millisecond)
	empty, same := firstByte(b, p.URL, nil, n), firstByte(b, p.URL, body, n)
	syncs := syncRate(b, s.store, 300*time.Millisecond)
	var through, toStart, toRequest time.Duration
	var each [3][]time.Duration // each send's through, toStart and toRequest
	cpu0, conns0 := processCPU(b, s.cmd.Process.Pid), conns.Load()
	for i := range n {
		t0 := time.Now()
		start, delta := firstDelta(b, s, fmt.Sprintf(`{"op":"send","id":"d%d","session":"bench%d","input":"hi"}`, i, i%sessions))
		for k, d := range []time.Duration{delta.Sub(t0), start.Sub(t0), time.Unix(0, asked.Load()).Sub(t0)} {
			each[k] = append(each[k], d)
		}
		through += each[0][i]
		toStart += each[1][i]
		toRequest += each[2][i]
	}
	through /= time.Duration(n)
	cpu := processCPU(b, s.cmd.Process.Pid) - cpu0
	b.ReportMetric(float64(conns.Load()-conns0)/float64(n), "provider-conns/send") // 0: the server keeps its connection
	syncs = (syncs + syncRate(b, s.store, 300*time.Millisecond)) / 2
	sync := time.Duration(float64(time.Second) / syncs)
	added := through - same
	b.ReportMetric(us(same), "µs/provider")
	b.ReportMetric(us(empty), "µs/provider-empty")
	b.ReportMetric(us(through), "µs/ctxfs")
	b.ReportMetric(us(added), "µs-added")
	b.ReportMetric(us(sync), "µs/fdatasync")
	b.ReportMetric(float64(added)/float64(sync), "added/fdatasync")
	b.ReportMetric(us(toStart/time.Duration(n)), "µs-to-start")
	b.ReportMetric(us(toRequest/time.Duration(n)), "µs-to-request")
	b.ReportMetric(us(cpu/time.Duration(n)), "server-CPU-µs/send")
	// The medians: on a shared machine a few sends that wait for a CPU
	// move the means.
	for k, unit := range []string{"µs/ctxfs-median", "µs-to-start-median", "µs-to-request-median"} {
		slices.Sort(each[k])
		b.ReportMetric(us(each[k][n/2]), unit)
	}
	reportJournal(b, s.store)
}

// firstByte is the mean time of n bare POSTs of body to the provider's
// chat completions, each to the first byte of its reply's body.
func firstByte(b *testing.B, provider string, body []byte, n int) time.Duration {
	var took time.Duration
	for range n {
		t0 := time.Now()
		resp, err := http.Post(provider+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		testkit.Must(b, err)
		var one [1]byte
		io.ReadFull(resp.Body, one[:])
		took += time.Since(t0)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return took / time.Duration(n)
}

// firstDelta sends line to the assistant and reads its frames to the end
// (the run ends before the next); it returns when the start frame and
// when the first delta came.
func firstDelta(b *testing.B, s *server, line string) (start, delta time.Time) {
	conn, err := net.Dial("unix", filepath.Join(s.root, "agent", "assistant.sock"))
	testkit.Must(b, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	conn.Write([]byte(line + "\n"))
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		at := time.Now()
		var f frame
		testkit.Must(b, json.Unmarshal(sc.Bytes(), &f))
		if f["type"] == "start" {
			start = at
		}
		if f["type"] == "delta" {
			delta = at
			break
		}
	}
	if start.IsZero() || delta.IsZero() {
		b.Fatalf("no start or no delta: %v", sc.Err())
	}
	io.Copy(io.Discard, conn)
	return start, delta
}
