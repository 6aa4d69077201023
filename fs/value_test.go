package fs

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
)

// TestValueHandleJudgesAtWrite: a write that leaves the value ending in
// a newline is judged, and a refusal fails that write with the check's
// errno, leaving nothing to commit; what the writes judge in all is
// bounded (maxJudgedBytes), so many pieces that each end in a newline
// cost linear time, and past the bound the close judges.
func TestValueHandleJudgesAtWrite(t *testing.T) {
	var judged int
	var committed [][]byte
	newHandle := func() *valueHandle {
		return &valueHandle{
			check: func(b []byte) error {
				judged += len(b)
				if bytes.Contains(b, []byte("bad")) {
					return abi.Errorf(syscall.EEXIST, "write", "refused")
				}
				return nil
			},
			commit: func(_ layout.Caller, b []byte) error {
				committed = append(committed, b)
				return nil
			},
			changed: func() {},
		}
	}
	ctx := context.Background()

	// The shell's case: the whole value in one write.
	h := newHandle()
	if n, errno := h.Write(ctx, []byte("bad\n"), 0); n != 0 || errno != syscall.EEXIST {
		t.Fatalf("a bad value in one write: %d, %v", n, errno)
	}
	if errno := h.Flush(ctx); errno != 0 || len(committed) != 0 {
		t.Fatalf("a refused write left something to commit: %v %q", errno, committed)
	}

	// Many short lines: judged until the bound, then left to the close.
	h, judged = newHandle(), 0
	line := []byte(strings.Repeat("x", 1023) + "\n")
	off := int64(0)
	for ; off+int64(len(line)) <= maxValueBytes; off += int64(len(line)) {
		if n, errno := h.Write(ctx, line, off); n != uint32(len(line)) || errno != 0 {
			t.Fatalf("write at %d: %d, %v", off, n, errno)
		}
	}
	if judged > maxJudgedBytes {
		t.Errorf("the writes judged %d bytes, over the bound of %d", judged, maxJudgedBytes)
	}
	if n, errno := h.Write(ctx, []byte("bad\n"), off-4); n != 4 || errno != 0 {
		t.Errorf("a write past the bound was judged: %d, %v", n, errno)
	}
	if errno := h.Flush(ctx); errno != 0 || len(committed) != 1 || int64(len(committed[0])) != off {
		t.Errorf("the close did not commit the value: %v, %d values", errno, len(committed))
	}
}
