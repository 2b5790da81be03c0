package interrupt

import (
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// parentDeath is the parent-death signal this process was started with
// (serve as a trainer's child: sandbox_fleet.start), and parent the
// parent it was started by. The kernel sends that signal again each time
// an orphan is handed to another reaper, and the second would be taken
// for "exit at once, skip the cleanup"; so the process takes it over: it
// clears the kernel's (from the main thread, whose it is: package
// initialization runs there) and sends itself the signal once, when its
// parent is gone.
var (
	parentDeath syscall.Signal
	parent      int
)

func init() {
	var sig int32
	if err := unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0, 0, 0); err != nil || sig == 0 {
		return
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, 0, 0, 0, 0); err != nil {
		return
	}
	parentDeath, parent = syscall.Signal(sig), os.Getppid()
}

// watchParent sends this process its parent-death signal once, when its
// parent is gone, until done closes.
func watchParent(done <-chan struct{}) {
	if parentDeath == 0 {
		return
	}
	go func() {
		tick := time.NewTicker(parentPoll)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if os.Getppid() != parent {
					_ = syscall.Kill(os.Getpid(), parentDeath)
					return
				}
			}
		}
	}()
}

// parentPoll is how often the parent is looked for.
const parentPoll = 500 * time.Millisecond
