// Package index keeps the session index of one session container (SPEC
// section 9): list, current, by-cwd/, by-hash/, by-uuid/.
//
// The store layout of a container's index is
//
//	<container>/index/current            single value: name + "\n"
//	<container>/index/by-cwd/<cwd-key>   single value
//	<container>/index/by-hash/<key>      single value
//	<container>/index/by-uuid/<uuid>     single value
//	<container>/index/list               snapshot of the list, one name a line
//
// Single values are regular files replaced atomically (storefs.ReplaceFile), 0600 and
// owned by the container's uid/gid. The order of list lives in memory (a
// linked list and a map, so a send costs the same with 10 or 100,000
// sessions); index/list is only a snapshot for people looking at the store,
// written in the background at most about once a second and at Close. At
// Load the snapshot is the order to start from when it can be trusted: after
// a clean Close it is the order exactly, so List survives a restart byte for
// byte; after a crash the sessions it misses or that were touched after it
// was written go in front, by the mtimes of their updated_at files (which
// change at most once a second, so they alone cannot order the sends of one
// second). A snapshot that is not a regular file or not a list of session
// names is not trusted: the order is rebuilt from those mtimes alone.
package index
