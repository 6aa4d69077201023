package testkit

import (
	"bufio"
	"io"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"
)

var aimockListening = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)

// Aimock runs @copilotkit/aimock (its llmock program, with node from
// PATH) on a free port of 127.0.0.1 serving the fixtures file, and
// returns its URL; its process group is killed when the test ends.
func Aimock(t testing.TB, llmock, fixtures string) string {
	t.Helper()
	cmd := exec.Command("node", llmock, "-p", "0", "-h", "127.0.0.1", "-f", fixtures, "--log-level", "info")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	out, err := cmd.StdoutPipe()
	Must(t, err)
	cmd.Stderr = cmd.Stdout
	// Its group is killed at the test's end; the kernel kills it with the
	// test binary (go test's -timeout panic and CI's kill run no cleanup).
	cmd.SysProcAttr = ChildAttr()
	Must(t, cmd.Start())
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := aimockListening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case url := <-found:
		return url
	case <-time.After(30 * time.Second):
		t.Fatal("aimock did not say where it listens")
	}
	return ""
}
