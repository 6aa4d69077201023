// Package memo owns the engine's memory of single values (session.Value,
// Engine.Value): each file's bytes and attributes by store path, kept
// until the engine says the file changed (Forget) or the budget pushes it
// out, least recently used first, and never an old value read while a
// change landed.
//
// It holds what the engine loads for it and nothing else: it must never
// read or write the store itself, decide which files are served from
// memory (the engine's Memoized) or import the engine, fs, server or cmd.
package memo

import (
	"container/list"
	"path"
	"sync"

	"golang.org/x/sys/unix"
)

// Value is a single-value file of the tree as the engine serves it: its
// bytes and the attributes of the store file they were read from, taken
// from one descriptor, so the two always agree.
type Value struct {
	Data []byte
	Stat unix.Stat_t
}

// memoBudget bounds what the memo holds, in bytes of values plus
// memoItemCost per value: 32 MiB keep the five values of about 20,000
// sessions (`ls`, `cat */state` over 10,000 sessions stay in memory) and
// at most 32 meta.json files of the 1 MiB a value may have.
const (
	memoBudget   = 32 << 20
	memoItemCost = 256 // the item, its list element and map entries
)

// Memo is the engine's memory of single values, by store path. A value
// is kept until the engine changes it (Forget, from the engine's
// announcement of each change) or the budget pushes it out, least
// recently used first.
//
// A value read from the store while a change lands could be the old one:
// gen counts forgets, and a read whose forget count moved meanwhile is
// served but not kept.
type Memo struct {
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

func (m *Memo) Get(rel string, load func() (Value, error)) (Value, error) {
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

// Forget drops what the memo holds for each rel: the file at rel, and
// every file directly in rel when it is a directory (a session archived,
// deleted or made anew).
func (m *Memo) Forget(rels ...string) {
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
func (m *Memo) drop(el *list.Element) {
	it := m.lru.Remove(el).(*memoItem)
	m.bytes -= len(it.v.Data) + memoItemCost
	delete(m.dirs[it.dir], it.name)
	if len(m.dirs[it.dir]) == 0 {
		delete(m.dirs, it.dir)
	}
}
