package session

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// Damage made behind the engine's back, while it runs and after a restart,
// makes the session unprovable: sends (new and replayed) and appends fail
// with EIO and write nothing; reading still works.
func TestDamagedHistoryIsEIO(t *testing.T) {
	damages := map[string]func(t *testing.T, p string){
		"flip a byte": func(t *testing.T, p string) {
			b := []byte(readFile(t, p))
			i := bytes.Index(b, []byte("hello"))
			b[i] ^= 0x20
			testkit.Must(t, os.WriteFile(p, b, 0o600))
		},
		"cut the last line": func(t *testing.T, p string) {
			b := []byte(readFile(t, p))
			i := bytes.LastIndexByte(b[:len(b)-1], '\n')
			testkit.Must(t, os.Truncate(p, int64(i+1)))
		},
		"cut part of the last line": func(t *testing.T, p string) {
			st, _ := os.Stat(p)
			testkit.Must(t, os.Truncate(p, st.Size()-3))
		},
		"append a valid line": func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			testkit.Must(t, err)
			f.WriteString(`{"role":"user","content":"forged"}` + "\n")
			f.Close()
		},
	}
	for name, damage := range damages {
		for _, restart := range []bool{false, true} {
			name, damage, restart := name, damage, restart
			t.Run(name+map[bool]string{false: " while running", true: " then restart"}[restart], func(t *testing.T) {
				env := newEnv(t)
				env.send(root0, coder(), `{"op":"send","id":"c1","input":"hello"}`)
				dir := env.sessDir("home/0", "coder", "default")
				if restart {
					env.e.Close()
				}
				damage(t, filepath.Join(dir, "messages.jsonl"))
				if restart {
					env.open()
				}
				before := env.settledTree()
				for _, line := range []string{
					`{"op":"send","id":"c2","input":"more"}`,
					`{"op":"send","id":"c1","input":"hello"}`, // a replay reuses history: EIO first
				} {
					_, err := env.do(root0, coder(), line)
					testkit.WantErrno(t, line, err, syscall.EIO)
				}
				ref := coderDefault()
				err := env.e.AppendLog(root0, ref, "events.jsonl", []byte(`{"type":"note"}`+"\n"))
				testkit.WantErrno(t, "append", err, syscall.EIO)
				testkit.Same(t, "sends to damaged history", before, testkit.Snapshot(t, env.store, nil))
				if _, err := os.ReadFile(filepath.Join(dir, "messages.jsonl")); err != nil {
					t.Fatalf("reading a damaged log: %v", err)
				}
			})
		}
	}
}
