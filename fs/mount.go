package fs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/mountlife"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Options tune the mounts.
type Options struct {
	Debug bool // log every FUSE request
}

// tops are the two mounts, named as the first component of store paths.
var tops = []string{"home", "shared"}

// Mounts are the two FUSE servers of one process.
type Mounts struct {
	e       Engine
	servers []*fuse.Server
	roots   map[string]*fs.Inode // "home", "shared" → mount root

	// gen counts the changes announced (changed): a lookup that saw it
	// move has the kernel ask again (mountState.attach).
	gen     atomic.Uint64
	pending *pending      // invalidations that may wait, for the notifier
	ids     *identities   // what each inode's node objects share (identity.go)
	lives   lives         // each session's life at its path (life.go)
	done    chan struct{} // closed by Stopping: the notifier stops
	once    sync.Once
}

// mountState is what the nodes of one mount share.
type mountState struct {
	e    Engine
	top  string // "home" or "shared": the first component of every rel here
	ms   *Mounts
	free freeIDs // the free trees' nodes by store inode
}

// changed invalidates what the kernel caches of rel (never blocks a
// handler: notify.go).
func (m *mountState) changed(rel string) { m.ms.changed(rel) }

// Mount mounts root/home and root/shared over the engine's store. As root
// the mounts are made directly; otherwise through fusermount3.
func Mount(e Engine, root string, opts Options) (*Mounts, error) {
	if err := mountlife.CanMount(); err != nil {
		return nil, err
	}
	ms := &Mounts{
		e:       e,
		roots:   map[string]*fs.Inode{},
		pending: newPending(),
		ids:     newIdentities(),
		done:    make(chan struct{}),
	}
	for _, top := range tops {
		if err := ms.mountOne(root, top, opts); err != nil {
			ms.Unmount()
			return nil, err
		}
	}
	closeFUSEOnExec()
	e.OnChange(ms.announced)
	go ms.notifier()
	return ms, nil
}

// closeFUSEOnExec marks this process's /dev/fuse descriptors close-on-exec.
// go-fuse opens them without it, so every program a run starts would hold
// the mount's connection open: after the server died, its own agents would
// keep the dead mount's callers waiting.
func closeFUSEOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, ent := range ents {
		fd, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink("/proc/self/fd/" + ent.Name()); err == nil && target == mountlife.DevFuse {
			unix.CloseOnExec(fd)
		}
	}
}

func (ms *Mounts) mountOne(root, top string, opts Options) error {
	dir := filepath.Join(root, top)
	mountlife.CleanStale(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	m := &mountState{e: ms.e, top: top, ms: ms}
	rootNode := &dirNode{storeNode: newStoreNode(where{m: m, rel: top, place: layout.Classify(top)})}
	srv, err := fs.Mount(dir, rootNode, mountOptions(opts))
	if err != nil {
		return fmt.Errorf("mount %s: %w", dir, err)
	}
	ms.servers = append(ms.servers, srv)
	ms.roots[top] = rootNode.EmbeddedInode()
	raiseReadahead(dir)
	return nil
}

// readaheadKB is how far the kernel reads ahead in the mount's files: as
// far as one READ may carry (MaxWrite), where the kernel's default is
// 128 KiB. The INIT reply can only lower the kernel's offer, so root
// raises it through the mount's bdi in sysfs; another user keeps the
// default. A cold read sends an eighth of the READs and is faster
// (docs/benchmarks.md#readahead); a warm read sends none.
const readaheadKB = maxWrite >> 10

// maxWrite is the most one READ or WRITE carries.
const maxWrite = 1 << 20

// raiseReadahead sets the readahead of the FUSE mount at dir (root only:
// for others the write fails and the default stays). The mount's device
// comes from the mount table, not from a stat of dir, which would be a
// request to this very server (the server never reads its own mount).
func raiseReadahead(dir string) {
	c, ok := mountlife.ConnAt(dir)
	if !ok {
		return
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", c.Dev[0], c.Dev[1])
	os.WriteFile(p, []byte(strconv.Itoa(readaheadKB)+"\n"), 0)
}

// mountOptions: the kernel enforces privacy from the store's owners and
// modes (default_permissions) for every uid (allow_other, root only);
// xattrs are off because the kernel would otherwise ask for
// security.capability before every write. NegativeTimeout stays nil: a
// name missing for one uid (another's home) must not be cached for all.
func mountOptions(opts Options) *fs.Options {
	sec := time.Second
	o := &fs.Options{
		// Names of the free trees; the ABI's set their own (attach).
		EntryTimeout: &sec,
		// AttrTimeout unset: each node sets its own (cacheTimeout,
		// dirAttrTimeout: node.go); a node's 0 would otherwise become the
		// global.
		MountOptions: fuse.MountOptions{
			FsName:        "ctxfs",
			Name:          "ctxfs",
			Options:       []string{"default_permissions"},
			DisableXAttrs: true,
			// 1 MiB writes reach the server whole (the default 128 KiB
			// cut a bulk append into eight durable appends).
			MaxWrite: maxWrite,
			Debug:    opts.Debug,
		},
	}
	if os.Geteuid() == 0 {
		o.AllowOther = true
		o.DirectMountStrict = true
	}
	return o
}

// Unmount unmounts both mounts through go-fuse (by path, through
// fusermount3 for a user) and waits until their requests have ended. The
// two are unmounted side by side: go-fuse waits for a mount's requests
// after unmounting it, which lasts as long as a copy of it lives in
// another mount namespace, and the other must not wait for that.
func (ms *Mounts) Unmount() error {
	ms.Stopping()
	errs := make([]error, len(ms.servers))
	var wg sync.WaitGroup
	for i, srv := range ms.servers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = srv.Unmount() }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stopping stops telling the kernel of changes: the mounts are about to
// go. A caller that unmounts them itself (cmd/ctxfs) calls it first.
func (ms *Mounts) Stopping() { ms.once.Do(func() { close(ms.done) }) }

// Wait blocks until both servers have stopped.
func (ms *Mounts) Wait() {
	for _, srv := range ms.servers {
		srv.Wait()
	}
}
