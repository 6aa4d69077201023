package session

import (
	"container/list"
	"io"
	"path"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Value is a single-value file of the tree as the engine serves it: its
// bytes and the attributes of the store file they were read from, taken
// from one descriptor, so the two always agree.
type Value struct {
	Data []byte
	Stat unix.Stat_t
}

// Memoized reports whether the engine serves a file of the tree from
// memory (Engine.Value): the session's small single values, which every
// `cat`, prompt and status asks for. latest.md, AGENTS.md and SKILLS.md
// can be megabytes and are read from the store at open; index values
// live in the index itself.
func Memoized(pl layout.Place) bool {
	switch pl.Kind {
	case layout.PlaceValue:
		return true
	case layout.PlaceReadOnly:
		return pl.File == abi.FileCreatedAt || pl.File == abi.FileUpdatedAt
	}
	return false
}

// Value returns the content and attributes of the single value at rel
// (Memoized places), from memory when the engine holds them, else read
// from the store once and kept: what the mount serves (fs). The store
// stays the truth: every change the engine makes is written there first,
// and changed() then drops the memory, so the next Value reads the new
// file. A derived value not yet written to the store (behind) is served
// from there, with the attributes its store file will have. The rules
// that protect or judge (archive's state check, self_id claims) read the
// store itself, or the value waiting for it (readValue). EFBIG for a file
// over layout.MaxValueFile. Data is shared: callers must not change it. The
// attributes are shown as the mount shows the store's (layout.ShownStat).
func (e *Engine) Value(rel string) (Value, error) {
	v, err := e.value(rel)
	if err == nil {
		v.Stat = *layout.ShownStat(rel, &v.Stat)
	}
	return v, err
}

func (e *Engine) value(rel string) (Value, error) {
	if v, ok := e.derived.Value(rel); ok {
		return Value(v), nil // the same fields (behind.Value)
	}
	return e.memo.get(rel, func() (Value, error) {
		f, err := e.root.OpenFile(rel, unix.O_RDONLY, 0)
		if err != nil {
			return Value{}, err
		}
		defer f.Close()
		var v Value
		if err := unix.Fstat(int(f.Fd()), &v.Stat); err != nil {
			return Value{}, err
		}
		if v.Stat.Size > layout.MaxValueFile {
			return Value{}, &abi.Error{Op: "read", Path: e.root.Show(rel), Errno: syscall.EFBIG}
		}
		if v.Data, err = io.ReadAll(io.LimitReader(f, layout.MaxValueFile+1)); err != nil {
			return Value{}, err
		}
		if len(v.Data) > layout.MaxValueFile {
			return Value{}, &abi.Error{Op: "read", Path: e.root.Show(rel), Errno: syscall.EFBIG}
		}
		v.Stat.Size = int64(len(v.Data)) // what was read is what is served
		return v, nil
	})
}

// memoBudget bounds what the memo holds, in bytes of values plus
// memoItemCost per value: 32 MiB keep the five values of about 20,000
// sessions (`ls`, `cat */state` over 10,000 sessions stay in memory) and
// at most 32 meta.json files of the 1 MiB a value may have.
const (
	memoBudget   = 32 << 20
	memoItemCost = 256 // the item, its list element and map entries
)

// memo is the engine's memory of single values, by store path. A value
// is kept until the engine changes it (forget, from changed) or the
// budget pushes it out, least recently used first.
//
// A value read from the store while a change lands could be the old one:
// gen counts forgets, and a read whose forget count moved meanwhile is
// served but not kept.
type memo struct {
	mu    sync.Mutex
	dirs  map[string]map[string]*list.Element // directory → file name → element of lru
	lru   *list.List                          // of *memoItem, most recently used at the front
	bytes int
	gen   uint64
}

type memoItem struct {
	dir, name string
	v         Value
}

func (m *memo) get(rel string, load func() (Value, error)) (Value, error) {
	dir, name := path.Split(rel)
	m.mu.Lock()
	if el := m.dirs[dir][name]; el != nil {
		m.lru.MoveToFront(el)
		v := el.Value.(*memoItem).v
		m.mu.Unlock()
		return v, nil
	}
	gen := m.gen
	m.mu.Unlock()
	v, err := load()
	if err != nil {
		return v, err // never kept: the next read tries the store again
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen != gen || m.dirs[dir][name] != nil {
		return v, nil
	}
	if m.dirs == nil {
		m.dirs, m.lru = map[string]map[string]*list.Element{}, list.New()
	}
	if m.dirs[dir] == nil {
		m.dirs[dir] = map[string]*list.Element{}
	}
	m.dirs[dir][name] = m.lru.PushFront(&memoItem{dir: dir, name: name, v: v})
	m.bytes += len(v.Data) + memoItemCost
	for m.bytes > memoBudget {
		m.drop(m.lru.Back())
	}
	return v, nil
}

// forget drops what the memo holds for each rel: the file at rel, and
// every file directly in rel when it is a directory (a session archived,
// deleted or made anew).
func (m *memo) forget(rels ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	for _, rel := range rels {
		dir, name := path.Split(rel)
		if el := m.dirs[dir][name]; el != nil {
			m.drop(el)
		}
		for _, el := range m.dirs[rel+"/"] {
			m.drop(el)
		}
	}
}

// drop takes one item out; caller holds mu.
func (m *memo) drop(el *list.Element) {
	it := m.lru.Remove(el).(*memoItem)
	m.bytes -= len(it.v.Data) + memoItemCost
	delete(m.dirs[it.dir], it.name)
	if len(m.dirs[it.dir]) == 0 {
		delete(m.dirs, it.dir)
	}
}
