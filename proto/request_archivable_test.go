package proto

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
)

// checkArchivableAccepted fails t unless an accepted archivable request
// is one the server may work on: valid names within the bound, in a
// home or a space, and no session of its own.
func checkArchivableAccepted(t *testing.T, r *Request) {
	t.Helper()
	if r.Sessions == nil || len(r.Sessions) > MaxArchivableSessions || r.Scope == abi.ScopeTemp || r.SessionGiven {
		t.Fatalf("accepted bad archivable %+v", r)
	}
	for _, n := range r.Sessions {
		if !abi.ValidSessionName(n) {
			t.Fatalf("accepted archivable of %q", n)
		}
	}
}

// archivableLine is an archivable request of names.
func archivableLine(t *testing.T, names []string, extra string) string {
	t.Helper()
	b, err := json.Marshal(names)
	if err != nil {
		t.Fatal(err)
	}
	return `{"op":"archivable","sessions":` + string(b) + extra + `}`
}

// TestParseArchivable: each refusal of op archivable's own field, with
// its errno; an accepted request keeps the names in their order.
func TestParseArchivable(t *testing.T) {
	most := make([]string, MaxArchivableSessions)
	for i := range most {
		most[i] = "s"
	}
	cases := []struct {
		line  string
		errno syscall.Errno
	}{
		{archivableLine(t, []string{"temp-b", "temp-a"}, ""), 0},
		{archivableLine(t, []string{}, ""), 0},
		{archivableLine(t, []string{"t"}, `,"scope":"shared","space":"team"`), 0},
		{archivableLine(t, most, ""), 0},
		{archivableLine(t, append(most, "s"), ""), syscall.EMSGSIZE},
		{`{"op":"archivable"}`, syscall.EINVAL},
		{`{"op":"archivable","sessions":"temp-a"}`, syscall.EINVAL},
		{`{"op":"archivable","sessions":[7]}`, syscall.EINVAL},
		{`{"op":"archivable","sessions":null}`, syscall.EINVAL},
		{archivableLine(t, []string{"ok", "../x"}, ""), syscall.EINVAL},
		{archivableLine(t, []string{"a/b"}, ""), syscall.EINVAL},
		{archivableLine(t, []string{"index"}, ""), syscall.EINVAL},
		{archivableLine(t, []string{""}, ""), syscall.EINVAL},
		{archivableLine(t, []string{strings.Repeat("x", 256)}, ""), syscall.EINVAL},
		{archivableLine(t, []string{"t"}, `,"session":"t"`), syscall.EINVAL},
		{archivableLine(t, []string{"t"}, `,"scope":"temp"`), syscall.EINVAL},
		{archivableLine(t, []string{strings.Repeat("x", 200)}, `,"pad":"`+strings.Repeat("p", abi.MaxRequestBytes)+`"`), syscall.EMSGSIZE},
	}
	for _, c := range cases {
		r, err := ParseRequest([]byte(c.line))
		if got := abi.Errno(err); got != c.errno {
			t.Errorf("ParseRequest(%.80s): errno %v (%v), want %v", c.line, got, err, c.errno)
		}
		if err == nil {
			checkArchivableAccepted(t, r)
		}
	}
	r, err := ParseRequest([]byte(archivableLine(t, []string{"temp-b", "temp-a", "temp-b"}, "")))
	if err != nil || strings.Join(r.Sessions, ",") != "temp-b,temp-a,temp-b" {
		t.Fatalf("archivable request %+v %v", r, err)
	}
}

// TestParseArchived: op archive of an archived session goes with delete
// or dry_run, in a home, and "uid" only with it; each refusal EINVAL.
func TestParseArchived(t *testing.T) {
	cases := []struct {
		line  string
		errno syscall.Errno
		uid   int64 // -1: none
	}{
		{`{"op":"archive","session":"s","delete":true,"archived":true}`, 0, -1},
		{`{"op":"archive","session":"s","dry_run":true,"archived":true,"uid":1001}`, 0, 1001},
		{`{"op":"archive","session":"s","delete":true,"archived":false}`, 0, -1},
		{`{"op":"archive","session":"s","archived":true}`, syscall.EINVAL, 0},
		{`{"op":"archive","session":"s","delete":true,"archived":true,"scope":"shared","space":"team"}`, syscall.EINVAL, 0},
		{`{"op":"archive","session":"s","delete":true,"archived":true,"scope":"temp"}`, syscall.EINVAL, 0},
		{`{"op":"archive","session":"s","delete":true,"uid":1001}`, syscall.EINVAL, 0},
		{`{"op":"archive","session":"s","delete":true,"archived":true,"uid":-1}`, syscall.EINVAL, 0},
		{`{"op":"archive","session":"../s","delete":true,"archived":true}`, syscall.EINVAL, 0},
		{`{"op":"archive","delete":true,"archived":true}`, syscall.EINVAL, 0},
	}
	for _, c := range cases {
		r, err := ParseRequest([]byte(c.line))
		if got := abi.Errno(err); err != nil && got != c.errno || err == nil && c.errno != 0 {
			t.Errorf("%s: %v, want %v", c.line, err, c.errno)
			continue
		}
		if err != nil {
			continue
		}
		if want := strings.Contains(c.line, `"archived":true`); r.Archived != want {
			t.Errorf("%s: archived %v", c.line, r.Archived)
		}
		if got := int64(-1); r.HomeUid != nil && int64(*r.HomeUid) != c.uid || r.HomeUid == nil && c.uid != got {
			t.Errorf("%s: uid %v, want %d", c.line, r.HomeUid, c.uid)
		}
	}
}
