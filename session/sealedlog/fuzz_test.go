package sealedlog

import (
	"bytes"
	"io"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// wholeLinesValid is the fuzz oracle: data is one or more complete lines,
// each accepted by abi.CheckLogLine.
func wholeLinesValid(data []byte) bool {
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return false
	}
	for _, ln := range bytes.Split(data[:len(data)-1], []byte("\n")) {
		if abi.CheckLogLine(ln) != nil {
			return false
		}
	}
	return true
}

// FuzzAppend appends arbitrary bytes to one real log per fuzz process,
// through the journal as the engine does (a small journal file, so that
// checkpoints seal the log every few appends): refused input must leave
// both files byte-for-byte unchanged, accepted input must land at the old
// end and read back, and the log must stay provable and verify clean
// against its seal and the journal (as fsck beside a running server)
// throughout.
func FuzzAppend(f *testing.F) {
	for _, s := range []string{
		`{"role":"user","content":"hi"}` + "\n",
		"{}\n{}\n",
		`{"a":{"b":[1,2,{"c":null}]}}` + "\n",
		"{\"u\":\"h\u00e9llo \u4e16\u754c \U0001F600\"}\n",
		`{"s":"\ud800"}` + "\n",
		"{\"a\":1}\r\n",
		" \t{} \n",
		"{}",
		"{} {}\n",
		"{\n}\n",
		"\n",
		"",
		"[]\n",
		"null\n",
		"\"str\"\n",
		"\xef\xbb\xbf{}\n",
		"{\"a\":\"\xc0\xaf\"}\n",
		"{\"a\":\"\x00\"}\n",
		"{\"a\":1}\n{\"b\":\n",
		"{\"a\":1}\n\n",
	} {
		f.Add([]byte(s))
	}
	p, s := paths(f)
	tj := journalIn(f, filepath.Dir(p), JournalConfig{RotateAt: 4 * journalAlign, CheckpointEvery: -1})
	l, err := Create(at(f, p, s), anyOwner)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		tj.j.settle(t) // no checkpoint writes the seal behind the snapshot's back
		before, size := snap(t, p, s), l.Size()
		off, err := l.Append(data)
		if !wholeLinesValid(data) {
			testkit.WantErrno(t, "Append", err, syscall.EINVAL)
			if !snap(t, p, s).same(before) || l.Size() != size {
				t.Fatalf("refused append of %q wrote something", data)
			}
			return
		}
		if err != nil || off != size || l.Size() != size+int64(len(data)) {
			t.Fatalf("append %q: off %d (size was %d), err %v", data, off, size, err)
		}
		got := make([]byte, len(data))
		if n, err := l.ReadAt(got, off); n != len(data) || (err != nil && err != io.EOF) || !bytes.Equal(got, data) {
			t.Fatalf("read back %q, want %q (%v)", got, data, err)
		}
		if file := readFile(t, p); !bytes.Equal(file[off:], data) {
			t.Fatalf("file tail %q, want %q", file[off:], data)
		}
		if err := l.Check(); err != nil {
			t.Fatal(err)
		}
		if ps := tj.verifyWithJournal(t, at(t, p, s)); len(ps) != 0 {
			t.Fatalf("verify after %q: %s", data, whats(ps))
		}
	})
}
