package fleet

import (
	"context"
	"slices"
	"sync"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

// lanes hands out a pass's tasks in order to the workers. Under recycling
// no two tasks of one image run at once: each task of an image takes over
// the sandbox the last one gave back, reset, so that claims scale with
// images, not tasks; a worker then takes the next task whose image is
// free, and other workers' tasks pass it by.
type lanes struct {
	mu      sync.Mutex
	cond    *sync.Cond
	pending []tasks.Task
	busy    map[string]bool
	// binding and claiming count, by image, the tasks handed out whose
	// claim does not yet name its sandbox, and whose sandbox is not yet
	// Ready.
	binding   map[string]int
	claiming  map[string]int
	exclusive bool
	stopped   bool
	// open lanes wait for tasks added while none is pending, until closed.
	open bool
}

func newLanes(ctx context.Context, ts []tasks.Task, exclusive bool) (*lanes, func() bool) {
	l := &lanes{pending: ts, busy: map[string]bool{}, binding: map[string]int{}, claiming: map[string]int{}, exclusive: exclusive}
	l.cond = sync.NewCond(&l.mu)
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.stopped = true
		l.mu.Unlock()
		l.cond.Broadcast()
	})
	return l, stop
}

// next returns the next task to run, waiting while every pending task's
// image is busy; false when none is left or the pass was stopped.
func (l *lanes) next() (tasks.Task, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.stopped || len(l.pending) == 0 && !l.open {
			return tasks.Task{}, false
		}
		if i := runnable(l.pending, l.busy); i >= 0 {
			t := l.pending[i]
			l.pending = slices.Delete(l.pending, i, i+1)
			l.binding[t.Image]++
			l.claiming[t.Image]++
			if l.exclusive {
				l.busy[t.Image] = true
			}
			return t, true
		}
		l.cond.Wait()
	}
}

// more reports whether tasks of image are still to be handed out.
func (l *lanes) more(image string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.morePending(image)
}

func (l *lanes) morePending(image string) bool {
	return slices.ContainsFunc(l.pending, func(t tasks.Task) bool { return t.Image == image })
}

// bound records that a task of image handed out has a claim naming its
// sandbox, Ready or not, or gave up on one, and reports whether it was the
// pass's last of image to bind: none is still to be handed out or binding.
func (l *lanes) bound(image string) (last bool) {
	return l.settle(l.binding, image)
}

// claimed records that a task of image handed out has its sandbox Ready,
// or gave up on one, and reports whether it was the pass's last of image
// to need one: none is still to be handed out or claiming.
func (l *lanes) claimed(image string) (last bool) {
	return l.settle(l.claiming, image)
}

func (l *lanes) settle(counts map[string]int, image string) (last bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	counts[image]--
	return counts[image] == 0 && !l.morePending(image)
}

// add hands out ts after the tasks pending.
func (l *lanes) add(ts []tasks.Task) {
	l.mu.Lock()
	l.pending = append(l.pending, ts...)
	l.mu.Unlock()
	l.cond.Broadcast()
}

// take takes back the tasks not handed out that which picks, in order.
func (l *lanes) take(which func(tasks.Task) bool) []tasks.Task {
	l.mu.Lock()
	defer l.mu.Unlock()
	var taken, kept []tasks.Task
	for _, t := range l.pending {
		if which(t) {
			taken = append(taken, t)
		} else {
			kept = append(kept, t)
		}
	}
	l.pending = kept
	return taken
}

// close has next return false once no task is pending.
func (l *lanes) close() {
	l.mu.Lock()
	l.open = false
	l.mu.Unlock()
	l.cond.Broadcast()
}

// done frees image for its next task.
func (l *lanes) done(image string) {
	l.mu.Lock()
	delete(l.busy, image)
	l.mu.Unlock()
	l.cond.Broadcast()
}

// runnable is the index of the first of pending whose image is not busy,
// -1 when there is none.
func runnable(pending []tasks.Task, busy map[string]bool) int {
	for i, t := range pending {
		if !busy[t.Image] {
			return i
		}
	}
	return -1
}
