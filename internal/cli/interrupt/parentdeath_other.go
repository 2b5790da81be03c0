//go:build !linux

package interrupt

// forgetParentDeath has nothing to clear where there is no parent-death
// signal.
func forgetParentDeath() {}
