package testkit

import "sync"

// Beside runs again over and over in each of n goroutines while work
// runs on the caller's goroutine: a race test's readers beside its
// writer. A goroutine ends once work has returned (it looks before each
// call) or when again returns false (it found what it looked for); Beside
// returns when work and every goroutine have ended, so that nothing of
// the test runs on after it.
func Beside(n int, work func(), again func() bool) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !again() {
					return
				}
			}
		}()
	}
	defer wg.Wait()
	defer close(stop) // also when work stops the test (t.Fatal ends its goroutine)
	work()
}
