package integration

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestListOrderSurvivesRestart: sends to 5 sessions within one second, in
// an order that the updated_at mtimes cannot tell (each session's second
// was already written to updated_at by an earlier send of that second),
// then a clean restart (SIGTERM): index/list read through the mount is
// byte for byte what it was before, and so is the snapshot in the store.
func TestListOrderSurvivesRestart(t *testing.T) {
	s := newFuseServer(t)
	names := []string{"alpha", "bravo", "charlie", "delta", "echo"}
	last := []string{"delta", "alpha", "echo", "charlie", "bravo"} // the final sends, oldest first
	want := "bravo\ncharlie\necho\nalpha\ndelta\n"
	listRel := coderRel + "/session/index/list"
	storeList := filepath.Join(s.store, "home", "0", "agent", "coder", "session", "index", "list")

	for i, n := range names { // the sessions exist before the timed second
		s.send(n, fmt.Sprintf("make-%d", i), "hello "+n)
	}
	sameSecond := false
	for attempt := 0; attempt < 5 && !sameSecond; attempt++ {
		// Start just after a second turns, so the 10 sends fit in it.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
		sec := time.Now().Unix()
		for i, n := range append(append([]string(nil), names...), last...) {
			s.send(n, fmt.Sprintf("a%d-%d", attempt, i), fmt.Sprintf("send %d of attempt %d", i, attempt))
		}
		sameSecond = time.Now().Unix() == sec
	}
	if !sameSecond {
		t.Fatal("could not fit 10 sends into one second in 5 attempts")
	}

	before := s.readMnt(listRel)
	if before != want {
		t.Fatalf("index/list before the restart = %q, want %q", before, want)
	}
	s.restart(syscall.SIGTERM)
	if got := fileBytes(t, storeList); got != want {
		t.Errorf("the snapshot in the store after a clean stop = %q, want %q", got, want)
	}
	if after := s.readMnt(listRel); after != before {
		t.Fatalf("index/list after a clean restart = %q, want %q (before the restart)", after, before)
	}
	if got := fileBytes(t, storeList); got != want {
		t.Errorf("the snapshot in the store after the restart = %q, want %q", got, want)
	}
}
