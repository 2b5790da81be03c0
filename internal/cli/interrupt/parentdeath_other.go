//go:build !linux

package interrupt

// watchParent has nothing to watch where there is no parent-death signal.
func watchParent(<-chan struct{}) {}
