package logx

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// Levels filter, and the json format is one JSON object per line.
func TestNewLevelAndFormat(t *testing.T) {
	var buf bytes.Buffer
	log, closer, err := New(Options{Level: "warn", Format: "json"}, &buf)
	if err != nil || closer != nil {
		t.Fatalf("New: %v, %v", closer, err)
	}
	log.Info("hidden", "run", "ctx-1")
	log.Warn("shown", "run", "ctx-2")
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line, got %q", buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil || m["msg"] != "shown" || m["run"] != "ctx-2" {
		t.Fatalf("line %q: %v %v", lines[0], m, err)
	}
	buf.Reset()
	log, _, _ = New(Options{}, &buf)
	log.Debug("hidden")
	log.Info("run start", "run", "ctx-3")
	if got := buf.String(); strings.Contains(got, "hidden") || !strings.Contains(got, "level=INFO") || !strings.Contains(got, "run=ctx-3") {
		t.Fatalf("default text logger wrote %q", got)
	}
}

func TestCheckRefusesUnknownValues(t *testing.T) {
	for _, o := range []Options{{Level: "verbose"}, {Level: "INFO"}, {Level: "info+2"}, {Format: "xml"}} {
		if err := o.Check(); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
	for _, l := range Levels {
		for _, f := range Formats {
			if err := (Options{Level: l, Format: f}).Check(); err != nil {
				t.Errorf("%s %s: %v", l, f, err)
			}
		}
	}
}

// The file is created 0600 and appended to; a symlink, a FIFO and a file
// of another user are refused, and nothing is written through them.
func TestOpenFileRefusals(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ctxfs.log")
	for i := 0; i < 2; i++ {
		log, c, err := New(Options{File: p}, nil)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("line")
		c.Close()
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("log file: %v, %v", st, err)
	}
	if b, _ := os.ReadFile(p); strings.Count(string(b), "msg=line") != 2 {
		t.Fatalf("not appended: %q", b)
	}

	target := filepath.Join(dir, "target")
	os.WriteFile(target, nil, 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o600)
	other := filepath.Join(dir, "other")
	os.WriteFile(other, nil, 0o600)
	if os.Geteuid() == 0 {
		os.Chown(other, 65534, 65534)
	}
	cases := map[string]string{link: "symbolic link", fifo: "not a regular file"}
	if os.Geteuid() == 0 {
		cases[other] = "belongs to uid 65534"
	}
	for path, want := range cases {
		_, _, err := New(Options{File: path}, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", filepath.Base(path), err, want)
		}
	}
	for _, f := range []string{target, other} {
		if b, _ := os.ReadFile(f); len(b) != 0 {
			t.Errorf("%s was written: %q", f, b)
		}
	}
	if _, _, err := New(Options{File: "/dev/null"}, nil); err != nil {
		t.Errorf("/dev/null: %v", err)
	}
}

// Line writes what the logger's own method writes (the time aside), and
// nothing below the logger's level, in both formats.
func TestLineAsTheLoggers(t *testing.T) {
	for _, format := range Formats {
		var buf bytes.Buffer
		log, _, err := New(Options{Format: format}, &buf)
		if err != nil {
			t.Fatal(err)
		}
		args := []any{"run", "ctx-1", "agent", "coder", "session", "a b", "uid", uint32(1001), "interrupted", true}
		log.Warn("run error", args...)
		Line(log, slog.LevelWarn, "run error", args...)
		Line(log, slog.LevelDebug, "hidden", args...)
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("%s: want two lines, got %q", format, buf.String())
		}
		if a, b := withoutTime(lines[0]), withoutTime(lines[1]); a != b {
			t.Errorf("%s: Line wrote\n%s\nwhere the logger writes\n%s", format, b, a)
		}
	}
}

// withoutTime cuts a line's time out (text: time=…; json: "time":"…").
func withoutTime(line string) string {
	return regexp.MustCompile(`^time=\S+ |"time":"[^"]*",`).ReplaceAllString(line, "")
}
