package session

import (
	"fmt"
	"sync"
	"testing"
)

// TestResumeNeverRepeatsAFrame resumes a session over and over while runs
// start in it: a frame is either in the recorded part of a reply or in its
// live part, never in both (the start frame of a run that had just become
// active was once in both).
func TestResumeNeverRepeatsAFrame(t *testing.T) {
	env := newEnv(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var dup string
	var mu sync.Mutex
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				frames, err := env.do(root0, coder(), `{"op":"resume"}`)
				if err != nil {
					continue // the session does not exist yet
				}
				seen := map[string]bool{}
				for _, f := range frames {
					l := string(f.Line())
					if seen[l] {
						mu.Lock()
						dup = l
						mu.Unlock()
					}
					seen[l] = true
				}
			}
		}()
	}
	for i := 0; i < 60; i++ {
		env.send(root0, coder(), fmt.Sprintf(`{"op":"send","id":"c%d","input":"x"}`, i))
	}
	close(stop)
	wg.Wait()
	if dup != "" {
		t.Fatalf("a resume reply repeated %s", dup)
	}
}
