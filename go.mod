module github.com/ctxfs/ctxfs

go 1.26.8

require (
	github.com/google/renameio/v2 v2.0.2 // indirect
	github.com/hanwen/go-fuse/v2 v2.12.1 // indirect
	github.com/rogpeppe/go-internal v1.16.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/term v0.48.0 // indirect
	golang.org/x/tools v0.26.0 // indirect
)
