// Package client is the client side of ctxfs: where things are under the
// mount root, how to talk to an agent or model socket, and how to read the
// session files a person would read with cat. It only ever uses the mount
// and the sockets (SPEC section 1); it never opens the store.
package client
