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
// Load the order is rebuilt from the mtimes of the sessions' updated_at files,
// never from the snapshot.
package index
