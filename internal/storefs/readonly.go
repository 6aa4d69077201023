package storefs

import (
	"os"

	"golang.org/x/sys/unix"
)

// ReadOnly returns a Root on the same descriptor that changes nothing, for
// a follower's view of a store another server writes (cluster/replica):
// its own write gate (gate.go) refuses every change with EROFS before any
// system call, whatever path of the engine or of the free trees asks for
// one, and it never probes the store's ways (a probe writes a scratch
// directory): it takes the portable ways, which are right everywhere.
// Its ShowAs and As copies are read-only too; the Root it came from is
// not (its gate is its own).
func (r *Root) ReadOnly() *Root {
	c := *r
	c.gate = new(gate)
	c.SetGate(func() error { return unix.EROFS })
	c.ways = new(ways)
	c.ways.once.Do(func() { c.ways.w = Ways{}.without(os.Getenv(PortableEnv)) })
	return &c
}
