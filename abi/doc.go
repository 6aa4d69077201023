// Package abi holds the vocabulary of the ctxfs session ABI that every other
// package shares: name rules, by-cwd keys, run ids, states and scopes, log
// line rules, timestamps, and the one table that maps engine errors to errnos.
//
// It owns no state and does no I/O beyond reading kernel entropy for run ids.
package abi
