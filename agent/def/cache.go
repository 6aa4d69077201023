package def

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/filestamp"
)

// Cache keeps loaded definitions, each with a witness of what it was read
// from, so that a send does not read and validate its definition again:
// Load stats the witnessed paths and reads the definition anew only when
// one of them changed. Reading it at every send was a visible share of
// the server's CPU (docs/benchmarks.md#definition-cache).
type Cache struct {
	defs *filestamp.Memo[string, *cachedDef]
}

// maxCachedDefs bounds the cache; only defined names load, so it is
// reached only with that many definitions, and then it starts again.
const maxCachedDefs = 1024

type cachedDef struct {
	def *Definition
	w   witness
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{defs: filestamp.NewMemo[string, *cachedDef](maxCachedDefs)}
}

// Load is the package's Load, from the cache when nothing the definition
// was read from has changed since. The definition returned is shared:
// callers must not change it. Errors are not kept: a definition that
// failed loads again next time.
func (c *Cache) Load(root, kind, name string) (*Definition, error) {
	key := root + "\x00" + kind + "\x00" + name
	if cd, ok := c.defs.Get(key); ok && cd.w.holds() {
		return cd.def, nil
	}
	w := witness{}
	def, err := load(root, kind, name, &w)
	if err != nil {
		return nil, err
	}
	// Not kept when a file changed too recently to be told apart from
	// the next change: read again.
	c.defs.Keep(key, &cachedDef{def: def, w: w}, racyWindow, w.stamps()...)
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

// stamps are the witnessed paths' stamps (the zero Stamp, which changed
// at no time, for one absent).
func (w witness) stamps() []filestamp.Stamp {
	s := make([]filestamp.Stamp, len(w))
	for i, p := range w {
		s[i] = p.stamp
	}
	return s
}
