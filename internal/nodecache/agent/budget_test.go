package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// fakeDisk is an image filesystem that pulls fill: each takes image bytes
// a moment after it starts, as a pull's layers land.
type fakeDisk struct {
	mu             sync.Mutex
	capacity, used int64
}

func (d *fakeDisk) filesystem(context.Context) (v1alpha1.ImageFilesystem, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return v1alpha1.ImageFilesystem{CapacityBytes: d.capacity, AvailableBytes: d.capacity - d.used}, nil
}

// A job pulling 16 images at once onto a disk near its high water stops
// within one image of the mark, as one puller would; the reservations are
// all handed back.
func TestBudgetStopsWithinOneImage(t *testing.T) {
	const gi, image = 1 << 30, 3 << 30
	for _, start := range []int64{60, 75, 79} {
		disk := &fakeDisk{capacity: 100 * gi, used: start * gi}
		b := newBudget(80, disk.filesystem)
		var wg sync.WaitGroup
		var stops sync.Map
		for w := range 16 {
			wg.Go(func() {
				for {
					release, stop, err := b.reserve(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					if stop != "" {
						stops.Store(w, stop)
						return
					}
					time.Sleep(time.Millisecond)
					disk.mu.Lock()
					disk.used += image
					disk.mu.Unlock()
					release(image)
				}
			})
		}
		wg.Wait()
		mark := int64(80 * gi)
		if disk.used > mark+image {
			t.Errorf("from %dGi used: %dGi after the job, past the 80Gi mark by more than one 3Gi image", start, disk.used/gi)
		}
		if disk.used < mark {
			t.Errorf("from %dGi used: the job stopped at %dGi, short of the mark", start, disk.used/gi)
		}
		if b.inFlight != 0 {
			t.Errorf("%d pulls still reserved", b.inFlight)
		}
		stops.Range(func(_, why any) bool {
			if !strings.Contains(why.(string), "high-water mark of 80%") {
				t.Errorf("stopped saying %q", why)
			}
			return true
		})
	}
}

// A filesystem the agent cannot read stops the job, and a waiting pull
// gives up when its job ends.
func TestBudgetFailsClosed(t *testing.T) {
	unseen := errors.New("the image filesystem at /var/lib/containerd is not visible to the agent")
	b := newBudget(80, func(context.Context) (v1alpha1.ImageFilesystem, error) { return v1alpha1.ImageFilesystem{}, unseen })
	if _, _, err := b.reserve(context.Background()); !errors.Is(err, unseen) {
		t.Errorf("reserve on an unreadable filesystem: %v", err)
	}
	disk := &fakeDisk{capacity: 100, used: 10}
	b = newBudget(80, disk.filesystem)
	if _, stop, err := b.reserve(context.Background()); stop != "" || err != nil {
		t.Fatalf("the first pull: %q, %v", stop, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// The first pull's size is unknown: the second waits for it.
	if _, _, err := b.reserve(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a second pull beside one of unknown size: %v, want it to wait", err)
	}
}
