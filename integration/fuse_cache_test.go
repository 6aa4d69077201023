package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Log readers keep the page cache across opens (FOPEN_KEEP_CACHE). A
// reader that opens again after appends must see exactly the store's
// bytes: never a stale end, never zeros where new lines are.
func TestKeptCacheSeesAppends(t *testing.T) {
	s := newFuseServer(t)
	s.send("cache", "c0", "first")
	mntLog := s.mnt(sessRel("cache") + "/messages.jsonl")
	storeLog := filepath.Join(s.store, sessRel("cache"), "messages.jsonl")
	held, err := os.Open(mntLog) // a reader that stays open meanwhile
	mustT(t, err)
	defer held.Close()
	for i := 1; i <= 20; i++ {
		got, err := os.ReadFile(mntLog) // warms the cache, then must see the next append
		mustT(t, err)
		if want := fileBytes(t, storeLog); string(got) != want {
			t.Fatalf("before append %d: mount shows %d bytes, store has %d", i, len(got), len(want))
		}
		if i%2 == 0 {
			s.send("cache", fmt.Sprintf("c%d", i), fmt.Sprintf("message %d", i))
		} else {
			mustT(t, appendMnt(mntLog, fmt.Sprintf(`{"role":"user","content":"direct %d"}`+"\n", i)))
		}
	}
	got, err := os.ReadFile(mntLog)
	mustT(t, err)
	if want := fileBytes(t, storeLog); string(got) != want || bytes.IndexByte(got, 0) >= 0 {
		t.Fatalf("after the appends: mount %d bytes, store %d", len(got), len(want))
	}
}
