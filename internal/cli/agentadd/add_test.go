package agentadd

import (
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

// parse refuses each bad value with EINVAL before anything is looked at,
// and maps the flags to the definition's files.
func TestParse(t *testing.T) {
	line := func(name string, flags ...string) *clienv.Parsed {
		p := &clienv.Parsed{Vals: map[string]string{}, Args: []string{name}}
		for i := 0; i+1 < len(flags); i += 2 {
			p.Vals[flags[i]] = flags[i+1]
		}
		return p
	}
	for _, bad := range []*clienv.Parsed{
		line("a/b", "cli", "codex"),
		line("x.sock", "cli", "codex"),
		line("x"),
		line("x", "cli", "claude"),
		line("x", "cli", "codex", "path", "codex"),
		line("x", "cli", "codex", "isolation", "jail"),
		line("x", "cli", "codex", "endpoint", "ftp://h/"),
		line("x", "cli", "codex", "endpoint", "http://h/\nx"),
		line("x", "cli", "codex", "model", "m\n"),
		line("x", "cli", "codex", "api-key-env", "1X"),
		line("x", "cli", "codex", "api-key-file", "key"),
		line("x", "cli", "codex", "api-key-env", "K", "api-key-file", "/k"),
	} {
		if _, err := parse(bad); abi.Errno(err) != syscall.EINVAL {
			t.Errorf("%v %v: %v, want EINVAL", bad.Args, bad.Vals, err)
		}
	}
	r, err := parse(line("coder", "cli", "opencode", "endpoint", "https://api.example/v1", "model", "anthropic/claude-sonnet-4-5", "api-key-env", "ANTHROPIC_API_KEY", "isolation", "chroot"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cli": "opencode", "isolation": "chroot", "endpoint": "https://api.example/v1", "model_id": "anthropic/claude-sonnet-4-5", "api_key_env": "ANTHROPIC_API_KEY"}
	if len(r.files) != len(want) {
		t.Errorf("files %v, want %v", r.files, want)
	}
	for k, v := range want {
		if r.files[k] != v {
			t.Errorf("%s = %q, want %q", k, r.files[k], v)
		}
	}
}
