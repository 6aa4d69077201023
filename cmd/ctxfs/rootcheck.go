package main

import (
	"os"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// refuseUnsafeRoot refuses a mount root that anyone besides root and the
// server's uid could change (storefs.CheckRoot), before anything is made
// there or in the store.
func refuseUnsafeRoot(root string) error {
	return storefs.CheckRoot(root, uint32(os.Geteuid()))
}
