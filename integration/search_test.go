package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// searchCtx runs `ctx agent search` as root (CTX_ROOT=s.root) and returns
// its stdout, stderr and exit status.
func searchCtx(t *testing.T, s *server, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return ctxSplit(t, s, append([]string{"agent", "search"}, args...)...)
}

// searchLines is the sorted output lines of a search that must find
// something, without the run ids (column 2).
func searchLines(t *testing.T, s *server, args ...string) []string {
	t.Helper()
	out, errs, code := searchCtx(t, s, args...)
	if code != 0 || errs != "" {
		t.Fatalf("search %v: exit %d, stderr %q, stdout %q", args, code, errs, out)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 4 || !(strings.HasPrefix(f[1], "ctx-") || f[1] == "-") {
			t.Fatalf("search %v: line %q", args, l)
		}
		lines = append(lines, f[0]+" "+f[2]+" "+f[3])
	}
	sort.Strings(lines)
	return lines
}

func sameLines(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\ngot  %q\nwant %q", what, got, want)
	}
}

// TestSearchEndToEnd: the real client and server find substrings in any
// script across sessions, with the index deleted and rebuilt, after an
// append through the mount, and never in another uid's home.
func TestSearchEndToEnd(t *testing.T) {
	s := newFuseServer(t)
	s.send("s1", "a1", "我们今天讨论文件系统")
	s.send("s2", "a2", "文件太大了, Please READ it")
	s.send("s3", "a3", "これはファイルシステムです 🚀")
	both := func(sess, text string) []string {
		return []string{sess + " user " + text, sess + " assistant " + text}
	}
	s1, s2, s3 := both("s1", "我们今天讨论文件系统"), both("s2", "文件太大了, Please READ it"), both("s3", "これはファイルシステムです 🚀")
	want := map[string][]string{
		"文件":          append(append([]string{}, s1...), s2...),
		"系统":          s1,
		"please read": s2,
		"ファイル":        s3,
		"🚀":           s3,
	}
	check := func(when string) {
		for q, w := range want {
			sameLines(t, when+": "+q, searchLines(t, s, "coder", q), w...)
		}
		if out, errs, code := searchCtx(t, s, "coder", "没有"); code != 1 || out != "" || errs != "" {
			t.Fatalf("%s: no match: exit %d out %q errs %q", when, code, out, errs)
		}
	}
	check("first search")
	idx := filepath.Join(s.store, "home/0/.search")
	if _, err := os.Stat(filepath.Join(idx, "agent/coder/s1/0")); err != nil {
		t.Fatalf("no index in the store: %v", err)
	}
	testkit.Must(t, os.RemoveAll(idx))
	check("index deleted")
	check("index rebuilt")

	// An append through the mount is found by the next query.
	f, err := os.OpenFile(s.mnt(sessRel("s3")+"/messages.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	testkit.Must(t, err)
	_, err = f.WriteString(`{"role":"user","content":"追加的文件行","ts":"2026-01-01T00:00:00.000Z"}` + "\n")
	testkit.Must(t, err)
	testkit.Must(t, f.Close())
	out, _, code := searchCtx(t, s, "coder", "追加", "--json")
	if code != 0 || !strings.Contains(out, `"type":"match","session":"s3"`) || !strings.Contains(out, `"text":"追加的文件行"`) {
		t.Fatalf("appended line: exit %d\n%s", code, out)
	}
	sameLines(t, "one session", searchLines(t, s, "coder", "文件", "--session", "s3"), "s3 user 追加的文件行")
	if _, errs, code := searchCtx(t, s, "coder", "文件", "--session", "nope"); code != 2 || !strings.Contains(errs, "ENOENT") {
		t.Fatalf("a missing session: exit %d %q", code, errs)
	}
	if _, errs, code := searchCtx(t, s, "coder", strings.Repeat("长", 400)); code != 2 || !strings.Contains(errs, "EINVAL") {
		t.Fatalf("a query over 1 KiB: exit %d %q", code, errs)
	}

	// Another uid searches its own home: root's text is not there.
	u := &cred{uid: 1001, gid: 1001}
	frames, raw, err := s.requestAs(u, "coder", `{"op":"search","query":"文件"}`)
	if err != nil || len(frames) != 1 || frames[0]["type"] != "searched" || fmt.Sprint(frames[0]["matches"]) != "0" {
		t.Fatalf("uid 1001's search: %v %q", err, raw)
	}
	out, err = runCmd(t, u, []string{"CTX_ROOT=" + s.root}, ctxBin, "agent", "search", "coder", "文件")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || out != "" {
		t.Fatalf("uid 1001's ctx search: %v %q", err, out)
	}
	// Nor through root's control file, which it cannot even open.
	out, err = runCmd(t, u, nil, "/bin/sh", "-c", `exec 3<>"$1" && printf '%s\n' '{"op":"search","query":"文件"}' >&3 && cat <&3`, "sh", s.mnt(sessRel("s1")+"/ctl"))
	if err == nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("uid 1001 through root's ctl: %v %q", err, out)
	}
	if out, code := s.fsck(); code != 0 {
		t.Fatalf("fsck after searches: exit %d\n%s", code, out)
	}
}
