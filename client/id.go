package client

import (
	"crypto/rand"
	"encoding/hex"
)

// NewClientID makes a fresh client id, "cli-" and 16 lowercase hex digits.
// It only has to be unique among the sends of one session; 64 random bits
// make a collision (which the server would refuse as a payload reuse)
// practically impossible.
func NewClientID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return "cli-" + hex.EncodeToString(b[:])
}
