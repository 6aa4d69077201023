package main

import (
	"debug/elf"
	"fmt"
	"os"
)

// refuseDynamic refuses to serve from a dynamically linked binary: the
// server runs helpers as root (the jail's trampoline among them), and a
// dynamic loader would honour LD_PRELOAD and the like in their
// environment before any of our code ran. make build and make install
// build with CGO_ENABLED=0; a hand-built binary without it is refused.
func refuseDynamic() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	interp, err := elfInterp(self)
	if err != nil {
		return fmt.Errorf("%s: cannot check that it is statically linked: %w", self, err)
	}
	if interp != "" {
		return fmt.Errorf("%s is dynamically linked (its loader %s would honour LD_PRELOAD in the root helpers' environment); "+
			"rebuild it static: CGO_ENABLED=0 go build -o %s ./cmd/ctxfs (make build does)", self, interp, self)
	}
	return nil
}

// elfInterp is the program interpreter (dynamic loader) an ELF file asks
// for, "" when it has none.
func elfInterp(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", err
			}
			return string(b[:len(b)-1]), nil
		}
	}
	return "", nil
}
