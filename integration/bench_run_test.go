package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
// first body byte (a bare HTTP client), side by side in one run. The
// difference is what ctxfs adds: the durable start, the definition, the
// conversation and the client's own hop.
func BenchmarkFirstDelta(b *testing.B) {
	requireFUSE(b)
	reply := openAIReply("hello there")
	p := newFakeProvider(b, reply)
	s := newModelServer(b, "openai-chat", p.URL+"/v1", nil)
	n := max(b.N, 50)
	direct := perRun(n, func(i int) {
		resp, err := http.Post(p.URL+"/v1/chat/completions", "application/json", nil)
		testkit.Must(b, err)
		var one [1]byte
		io.ReadFull(resp.Body, one[:])
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	})
	through := perRun(n, func(i int) {
		firstDelta(b, s, fmt.Sprintf(`{"op":"send","id":"d%d","session":"bench","input":"hi"}`, i))
	})
	b.ReportMetric(us(direct), "µs/provider")
	b.ReportMetric(us(through), "µs/ctxfs")
	b.ReportMetric(float64(through)/float64(direct), "ctxfs/provider")
	b.ReportMetric(us(through-direct), "µs-added")
}

// firstDelta sends line to the assistant and returns once the first delta
// arrives, then reads the rest so that the run ends before the next.
func firstDelta(b *testing.B, s *server, line string) {
	conn, err := net.Dial("unix", filepath.Join(s.root, "agent", "assistant.sock"))
	testkit.Must(b, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	conn.Write([]byte(line + "\n"))
	sc := bufio.NewScanner(conn)
	seen := false
	for sc.Scan() {
		var f frame
		testkit.Must(b, json.Unmarshal(sc.Bytes(), &f))
		if f["type"] == "delta" {
			seen = true
			break
		}
	}
	if !seen {
		b.Fatalf("no delta: %v", sc.Err())
	}
	io.Copy(io.Discard, conn)
}
