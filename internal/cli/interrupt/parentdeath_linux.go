package interrupt

import "golang.org/x/sys/unix"

// forgetParentDeath clears this process's parent-death signal. A process
// started with one (serve as a trainer's child, sandbox_fleet.start) gets
// it again each time it is handed to another reaper once its parent died;
// once it is stopping, that must not be taken for the second signal that
// skips the cleanup.
func forgetParentDeath() { _ = unix.Prctl(unix.PR_SET_PDEATHSIG, 0, 0, 0, 0) }
