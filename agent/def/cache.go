package def

import (
	"errors"
	"io/fs"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/filestamp"
)

// Cache keeps loaded definitions, each with a witness of what it was read
// from, so that a send does not read and validate its definition again:
// Load stats the witnessed paths and reads the definition anew only when
// one of them changed. Reading it at every send was a visible share of
// the server's CPU (docs/benchmarks.md#definition-cache).
type Cache struct {
	mu   sync.Mutex
	defs map[string]*cachedDef
}

// maxCachedDefs bounds the cache; only defined names load, so it is
// reached only with that many definitions, and then it starts again.
const maxCachedDefs = 1024

type cachedDef struct {
	def *Definition
	w   witness
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{defs: map[string]*cachedDef{}} }

// Load is the package's Load, from the cache when nothing the definition
// was read from has changed since. The definition returned is shared:
// callers must not change it. Errors are not kept: a definition that
// failed loads again next time.
func (c *Cache) Load(root, kind, name string) (*Definition, error) {
	key := root + "\x00" + kind + "\x00" + name
	c.mu.Lock()
	cd := c.defs[key]
	c.mu.Unlock()
	if cd != nil && cd.w.holds() {
		return cd.def, nil
	}
	w := witness{}
	def, err := load(root, kind, name, &w)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.racy(time.Now()) {
		delete(c.defs, key) // changed too recently to be told apart from the next change: read again
		return def, nil
	}
	if len(c.defs) >= maxCachedDefs {
		clear(c.defs)
	}
	c.defs[key] = &cachedDef{def: def, w: w}
	return def, nil
}

// witness is every path a definition was read from, as it was then: the
// NAME.d directory (names that came or went in it move its mtime), each
// control file read (an edit in place moves its mtime and ctime; a file
// replaced is another inode), the program, the skills' directories, and
// for an agent its model's. A path that was absent is witnessed absent.
// Paths are followed as the reads followed them.
type witness []seenPath

type seenPath struct {
	path   string
	absent bool
	stamp  filestamp.Stamp // Ino 0: never holds (no stat to compare)
}

// racyWindow: a definition a file of which changed less than this long
// before it was read is not kept (filestamp.RacyWindow; a variable for
// the tests).
var racyWindow = filestamp.RacyWindow

// stat witnesses path by stat; it returns what stat returned.
func (w *witness) stat(path string) (os.FileInfo, error) {
	fi, err := os.Stat(path)
	w.saw(path, fi, err)
	return fi, err
}

// saw witnesses path as fi (from a stat or an open file's fstat), or as
// absent when err says it does not exist. Nothing is witnessed for a nil
// w (the package's uncached Load).
func (w *witness) saw(path string, fi os.FileInfo, err error) {
	if w == nil {
		return
	}
	if err != nil {
		// Absent is what a later stat can confirm; any other failure
		// fails the load, which is not kept.
		*w = append(*w, seenPath{path: path, absent: errors.Is(err, fs.ErrNotExist)})
		return
	}
	*w = append(*w, seenPath{path: path, stamp: filestamp.OfInfo(fi)})
}

// holds reports whether every witnessed path is still as it was.
func (w witness) holds() bool {
	for _, p := range w {
		var st unix.Stat_t
		err := unix.Stat(p.path, &st)
		switch {
		case p.absent:
			if !errors.Is(err, unix.ENOENT) {
				return false
			}
		case err != nil || p.stamp.Ino == 0 || filestamp.Of(&st) != p.stamp:
			return false
		}
	}
	return true
}

// racy reports whether a witnessed path changed within racyWindow of now.
func (w witness) racy(now time.Time) bool {
	for _, p := range w {
		if !p.absent && p.stamp.ChangedWithin(racyWindow, now) {
			return true
		}
	}
	return false
}
