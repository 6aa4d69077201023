// Command hangfs is a FUSE server that gets itself stuck the way a ctxfs
// server can when it is killed: its one file's READ is never answered, and
// once a reader waits on it, another thread invalidates the file's pages
// (NotifyContent) and waits, uninterruptibly, for the page the reader
// holds. A SIGKILL then cannot end the process, nor therefore the FUSE
// connection, unless something outside aborts it.
//
// usage: hangfs DIR CTXFS|-  (CTXFS: start CTXFS's watchdog for the mount;
// -: none). It prints "ready" once mounted (and watched), then
// "notifying" when the invalidation starts. DIR may be /dev/fd/N, a
// /dev/fuse descriptor mounted for it: a user's mount, as fusermount3
// makes one, from a process that is not root.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/internal/mountlife"
)

type root struct{ fs.Inode }

type file struct{ fs.Inode }

var (
	theFile = &file{}
	reading = make(chan struct{}, 1)
)

func (r *root) OnAdd(ctx context.Context) {
	r.AddChild("f", r.NewPersistentInode(ctx, theFile, fs.StableAttr{Mode: syscall.S_IFREG}), true)
}

func (f *file) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode, out.Size = 0o644, 4096
	return 0
}

func (f *file) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

// Read never answers: the reader keeps its page locked.
func (f *file) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	select {
	case reading <- struct{}{}:
	default:
	}
	time.Sleep(time.Hour)
	return nil, syscall.EIO
}

func main() {
	dir, ctxfsBin := os.Args[1], os.Args[2]
	srv, err := fs.Mount(dir, &root{}, &fs.Options{MountOptions: fuse.MountOptions{Name: "hangfs", DirectMountStrict: os.Geteuid() == 0}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if ctxfsBin != "-" {
		c, _ := mountlife.ConnAt(dir)
		argv := []string{"ctxfs", "watchdog", "--server", strconv.Itoa(os.Getpid()), c.String()}
		if _, err := mountlife.StartWatchdog(ctxfsBin, argv, nil, slog.Default()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			srv.Unmount()
			os.Exit(1)
		}
	}
	fmt.Println("ready")
	go func() {
		<-reading
		time.Sleep(200 * time.Millisecond) // the reader now waits on its page
		fmt.Println("notifying")
		theFile.NotifyContent(0, 0)
	}()
	srv.Wait()
}
