package sessions

import (
	"bufio"
	"io"
	"sync"
	"time"

	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

// flushEvery is how long a line printed into a pipe or a file may wait
// in linesOut's buffer.
const flushEvery = 100 * time.Millisecond

// linesOut is w for many short lines: on a terminal w itself, where the
// lines take turns with a progress line; elsewhere buffered, and still
// streamed: what is written goes out within flushEvery, and all of it by
// the time done returns. A write each was a tenth of a 10,000-line gc
// preview (docs/benchmarks.md#gc-preview).
func linesOut(w io.Writer) (out io.Writer, done func()) {
	if clienv.IsTerminal(w) {
		return w, func() {}
	}
	b := &flushed{w: bufio.NewWriterSize(w, 64<<10)}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(flushEvery)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				b.flush()
			case <-stop:
				return
			}
		}
	}()
	return b, func() {
		close(stop)
		<-stopped
		b.flush()
	}
}

// flushed is a buffered writer that a ticker flushes.
type flushed struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (f *flushed) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.Write(p)
}

func (f *flushed) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.w.Flush()
}
