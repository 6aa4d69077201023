package abi

import (
	"encoding/hex"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// RunIDPrefix starts every run id.
const RunIDPrefix = "ctx-"

// NewRunID draws a run id from 128 bits of kernel entropy (getrandom(2)):
// "ctx-" and 32 lowercase hex digits. It is never derived from clocks,
// counters or client ids.
func NewRunID() (string, error) {
	var b [16]byte
	for got := 0; got < len(b); {
		n, err := unix.Getrandom(b[got:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("getrandom: %w", err)
		}
		got += n
	}
	return RunIDPrefix + hex.EncodeToString(b[:]), nil
}

// IsRunID reports whether s has the shape of a run id.
func IsRunID(s string) bool {
	return len(s) == len(RunIDPrefix)+32 && strings.HasPrefix(s, RunIDPrefix) && isLowerHex(s[len(RunIDPrefix):])
}
