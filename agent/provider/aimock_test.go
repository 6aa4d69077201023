package provider

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// These tests run Stream against @copilotkit/aimock, an independent
// simulator of both APIs (pinned in testdata/aimock/package.json, fixtures
// in testdata/aimock/fixtures.json): its streams are written by people who
// are not us, from the providers' documentation and recordings.

// aimockKey is the only key the simulator accepts.
const aimockKey = "aimock-test-key"

// needAimock skips, or fails under CTXFS_REQUIRE_AIMOCK=1, when the
// simulator is not installed.
func needAimock(t *testing.T, why string) {
	t.Helper()
	msg := why + "; install it with `npm ci --no-audit --no-fund` in agent/provider/testdata/aimock (scripts/deps.sh does it)"
	if os.Getenv("CTXFS_REQUIRE_AIMOCK") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// listenLine is how the simulator says where it listens.
var listenLine = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)

// urlWriter is the simulator's stdout: it keeps the output for failure
// reports and sends the listening URL once it is printed.
type urlWriter struct {
	mu   sync.Mutex
	out  bytes.Buffer
	url  chan string
	sent bool
}

func (w *urlWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.Write(p)
	if m := listenLine.FindSubmatch(w.out.Bytes()); m != nil && !w.sent {
		w.sent = true
		w.url <- string(m[1])
	}
	return len(p), nil
}

func (w *urlWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}

// startAimock runs the simulator on a free port and returns its base URL;
// the process is killed when the test ends.
func startAimock(t *testing.T) string {
	dir := filepath.Join("testdata", "aimock")
	bin := filepath.Join(dir, "node_modules", ".bin", "llmock")
	if _, err := os.Stat(bin); err != nil {
		needAimock(t, "aimock is not installed")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		needAimock(t, "node is not on PATH")
	}
	// -p 0: the kernel picks a free port and the simulator prints it.
	// -c 6: six characters a chunk, so that a reply comes in several deltas.
	// -l 2: 2 ms between chunks, so that they leave one by one and a
	// truncated stream is cut after its headers, not before.
	cmd := exec.Command(node, filepath.Join("node_modules", ".bin", "llmock"),
		"-p", "0", "-h", "127.0.0.1", "-f", "fixtures.json", "-c", "6", "-l", "2", "--log-level", "info")
	cmd.Dir = dir
	// Only what it needs: no provider keys or URLs from our environment.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "AIMOCK_API_KEYS=" + aimockKey}
	stdout := &urlWriter{url: make(chan string, 1)}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	select {
	case url := <-stdout.url:
		return url
	case err := <-exited:
		t.Fatalf("aimock exited (%v): %s%s", err, stdout.String(), stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("aimock did not say where it listens: %s%s", stdout.String(), stderr.String())
	}
	return ""
}

// ask sends one user message to the simulator through api.
func ask(t *testing.T, base, api, key, text string) ([]string, modelapi.Result, error) {
	cfg := configFor(api, base)
	cfg.APIKey = key
	cfg.Timeout = 20 * time.Second
	req := modelapi.Request{System: "test", Turns: []modelapi.Turn{{Role: modelapi.RoleUser, Text: text}}}
	return collect(context.Background(), cfg, req)
}

func TestAimock(t *testing.T) {
	t.Parallel()
	base := startAimock(t)
	for _, api := range []string{modelapi.OpenAIChat, modelapi.AnthropicMessages} {
		t.Run(api, func(t *testing.T) {
			t.Parallel()
			t.Run("text and usage", func(t *testing.T) {
				t.Parallel()
				deltas, res, err := ask(t, base, api, aimockKey, "ctxfs-hello")
				if err != nil {
					t.Fatal(err)
				}
				const want = "Hello from aimock, streamed in pieces."
				stop := map[string]string{modelapi.OpenAIChat: "stop", modelapi.AnthropicMessages: "end_turn"}[api]
				if !reflect.DeepEqual(res, modelapi.Result{Text: want, InputTokens: 11, OutputTokens: 7, StopReason: stop}) {
					t.Errorf("result %+v", res)
				}
				if len(deltas) < 3 || strings.Join(deltas, "") != want {
					t.Errorf("deltas %q", deltas)
				}
			})
			t.Run("tool history", func(t *testing.T) {
				t.Parallel()
				cfg := configFor(api, base)
				cfg.APIKey = aimockKey
				req := toolRequest
				req.Turns = append(append([]modelapi.Turn(nil), req.Turns...), modelapi.Turn{Role: modelapi.RoleUser, Text: "ctxfs-hello"})
				_, res, err := collect(context.Background(), cfg, req)
				if err != nil || res.Text == "" {
					t.Fatalf("%+v, %v", res, err)
				}
			})
			t.Run("tool calls", func(t *testing.T) {
				t.Parallel()
				aimockToolCalls(t, base, api)
			})
			for _, c := range []struct {
				name, key, text string
				want            syscall.Errno
				words           []string
			}{
				{"wrong key", "not-the-key", "ctxfs-hello", syscall.EACCES, []string{"401", "Invalid API key"}},
				{"rate limited", aimockKey, "ctxfs-rate-limited", syscall.EAGAIN, []string{"429", "slow down, ctxfs"}},
				{"truncated stream", aimockKey, "ctxfs-truncate", syscall.EIO, []string{"stream ended early"}},
				{"chaos drop", aimockKey, "ctxfs-chaos-drop", syscall.EIO, []string{"500", "Chaos: request dropped"}},
				{"chaos malformed", aimockKey, "ctxfs-chaos-malformed", syscall.EIO, []string{"malformed stream"}},
				{"chaos disconnect", aimockKey, "ctxfs-chaos-disconnect", syscall.EIO, nil},
			} {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					_, _, err := ask(t, base, api, c.key, c.text)
					t.Log(err)
					wantRefusal(t, err, c.want, c.words...)
					if err != nil && strings.Contains(err.Error(), c.key) {
						t.Errorf("the key is in %q", err)
					}
				})
			}
		})
	}
}

// aimockToolCalls asks for tools in api's format and gets the fixture's
// three calls back, decoded, then sends the two calls of offered tools
// with their results, which the simulator matches only as real tool
// messages (by the last result's call id).
func aimockToolCalls(t *testing.T, base, api string) {
	cfg := configFor(api, base)
	cfg.APIKey = aimockKey
	cfg.Timeout = 20 * time.Second
	tools := []modelapi.Tool{{Name: "fs.read", Description: "Read a file."}, {Name: "shell.exec", Description: "Run a command."}}
	req := modelapi.Request{System: "test", Turns: []modelapi.Turn{{Role: modelapi.RoleUser, Text: "ctxfs-tools"}}, Tools: tools}
	deltas, res, err := collect(context.Background(), cfg, req)
	if err != nil {
		t.Fatal(err)
	}
	want := []modelapi.ToolCall{
		{ID: "call_ctxfs_1", Name: "fs.read", Arguments: `{"path":"/etc/hostname","note":"long enough to stream in pieces"}`},
		{ID: "call_ctxfs_2", Name: "shell.exec", Arguments: `{"argv":["true"]}`},
		{ID: "call_ctxfs_3", Name: "made_up", Arguments: `{}`}, // offered by no tool: kept as the wire spelled it
	}
	if res.Text != "Let me look." || strings.Join(deltas, "") != res.Text || !reflect.DeepEqual(res.ToolCalls, want) {
		t.Fatalf("deltas %q, result %+v", deltas, res)
	}
	stop := map[string]string{modelapi.OpenAIChat: "tool_calls", modelapi.AnthropicMessages: "tool_use"}[api]
	if res.StopReason != stop {
		t.Errorf("stop reason %q, want %q", res.StopReason, stop)
	}
	req.Turns = append(req.Turns,
		modelapi.Turn{Role: modelapi.RoleAssistant, Text: res.Text, ToolCalls: res.ToolCalls[:2]},
		modelapi.Turn{Role: modelapi.RoleTool, ToolCallID: "call_ctxfs_1", ToolName: "fs.read", Text: "box"},
		modelapi.Turn{Role: modelapi.RoleTool, ToolCallID: "call_ctxfs_2", ToolName: "shell.exec", Text: `{"exit":0}`})
	_, res, err = collect(context.Background(), cfg, req)
	if err != nil || res.Text != "Both tools answered." || res.ToolCalls != nil {
		t.Fatalf("second turn: %+v, %v", res, err)
	}
}
