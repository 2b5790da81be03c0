package agent

import (
	"context"
	"sync"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// budget keeps one job's pulls on this node within its high-water mark:
// each pull reserves what an image of the job has been seen to take
// before it starts (nodecache.Admit), so parallel pullers stop within one
// image of the mark rather than each starting one last pull.
type budget struct {
	highWater int32
	// filesystem reads the image filesystem.
	filesystem func(context.Context) (v1alpha1.ImageFilesystem, error)

	mu       sync.Mutex
	inFlight int
	// finished and finishedBytes are the job's pulls that ended with a
	// size, for the estimate of the next.
	finished, finishedBytes int64
	// changed is closed, and replaced, when a pull ends.
	changed chan struct{}
}

func newBudget(highWater int32, filesystem func(context.Context) (v1alpha1.ImageFilesystem, error)) *budget {
	return &budget{highWater: highWater, filesystem: filesystem, changed: make(chan struct{})}
}

// reserve waits until one more pull may start and reserves it; release
// must then be called with the bytes the image took (0 if unknown). It
// returns why not when the job must stop pulling here, or the error of
// reading the filesystem.
func (b *budget) reserve(ctx context.Context) (release func(size int64), stop string, err error) {
	for {
		b.mu.Lock()
		fs, err := b.filesystem(ctx)
		if err != nil {
			b.mu.Unlock()
			return nil, "", err
		}
		var estimate int64
		if b.finished > 0 {
			estimate = b.finishedBytes / b.finished
		}
		a := nodecache.Admit(fs, b.highWater, nodecache.Reservations{InFlight: b.inFlight, Estimate: estimate})
		changed := b.changed
		switch a.Decision {
		case nodecache.Start:
			b.inFlight++
			b.mu.Unlock()
			return b.release, "", nil
		case nodecache.Stop:
			b.mu.Unlock()
			return nil, a.Why, nil
		}
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
}

func (b *budget) release(size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight--
	if size > 0 {
		b.finished++
		b.finishedBytes += size
	}
	close(b.changed)
	b.changed = make(chan struct{})
}
