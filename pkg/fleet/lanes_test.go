package fleet

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
)

func TestRunnable(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec string
		busy string
		want int
	}{
		{"nothing busy takes the first", "a b c", "", 0},
		{"a busy image is passed by", "a a b", "a", 2},
		{"all busy", "a b", "ab", -1},
		{"none pending", "", "", -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			busy := map[string]bool{}
			for _, r := range tt.busy {
				busy[string(r)] = true
			}
			if got := runnable(batch(tt.spec), busy); got != tt.want {
				t.Errorf("runnable = %d, want %d", got, tt.want)
			}
		})
	}
}

// Under recycling no two tasks of an image are out at once, every task is
// handed out once, and workers do not wait on one image while another's
// tasks are pending.
func TestLanesKeepAnImageToOneTaskAtATime(t *testing.T) {
	ts := Interleave(batch("aaaaaa bbbbbb ccc"))
	l, stop := newLanes(context.Background(), ts, true)
	defer stop()
	var mu sync.Mutex
	running, seen := map[string]int{}, map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				task, ok := l.next()
				if !ok {
					return
				}
				mu.Lock()
				running[task.Image]++
				seen[task.ID]++
				if running[task.Image] > 1 {
					t.Errorf("two tasks of %s at once", task.Image)
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				running[task.Image]--
				mu.Unlock()
				l.done(task.Image)
			}
		})
	}
	wg.Wait()
	if len(seen) != len(ts) {
		t.Errorf("%d of %d tasks handed out", len(seen), len(ts))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("task %s handed out %d times", id, n)
		}
	}
}

// A stopped pass hands out nothing more, also to a worker waiting for a
// busy image.
func TestLanesStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l, stop := newLanes(ctx, []tasks.Task{{ID: "1", Image: "a"}, {ID: "2", Image: "a"}}, true)
	defer stop()
	if _, ok := l.next(); !ok {
		t.Fatal("no first task")
	}
	if !l.more("a") || l.more("b") {
		t.Error("more: want a pending task of a, none of b")
	}
	got := make(chan bool)
	go func() {
		_, ok := l.next()
		got <- ok
	}()
	cancel()
	if <-got {
		t.Error("a task was handed out after the pass stopped")
	}
}

// The last of an image's tasks to have its sandbox is the one after which
// none is handed out or claiming: its pool's refills have no task left.
func TestLanesLastClaim(t *testing.T) {
	l, stop := newLanes(context.Background(), []tasks.Task{{ID: "1", Image: "a"}, {ID: "2", Image: "b"}, {ID: "3", Image: "a"}}, false)
	defer stop()
	for range 3 {
		if _, ok := l.next(); !ok {
			t.Fatal("a task was not handed out")
		}
	}
	if l.claimed("a") {
		t.Error("the first of a's two claims was taken for the last")
	}
	if !l.claimed("b") {
		t.Error("b's only claim was not the last")
	}
	if !l.claimed("a") {
		t.Error("a's second claim was not the last")
	}

	l, stop = newLanes(context.Background(), []tasks.Task{{ID: "1", Image: "a"}, {ID: "2", Image: "a"}}, false)
	defer stop()
	l.next()
	if l.claimed("a") {
		t.Error("a claim was taken for the last while a task of its image was still to be handed out")
	}
}

// An image's last claim to name its sandbox and its last to have it Ready
// are told apart: a claim bound to a sandbox still starting is not Ready.
func TestLanesLastBoundBeforeLastClaimed(t *testing.T) {
	l, stop := newLanes(context.Background(), []tasks.Task{{ID: "1", Image: "a"}, {ID: "2", Image: "a"}}, false)
	defer stop()
	l.next()
	l.next()
	if l.bound("a") {
		t.Error("the first of a's two claims to be bound was taken for the last")
	}
	if l.claimed("a") {
		t.Error("the first of a's two claims to be Ready was taken for the last")
	}
	if !l.bound("a") {
		t.Error("a's second claim to be bound was not the last, though the other was not yet Ready")
	}
	if !l.claimed("a") {
		t.Error("a's second claim to be Ready was not the last")
	}
}

// Open lanes wait for tasks added while none is pending, hand back the
// tasks not handed out, and end once closed with none pending.
func TestLanesOpen(t *testing.T) {
	l, stop := newLanes(context.Background(), []tasks.Task{{ID: "1", Image: "a"}}, false)
	defer stop()
	l.open = true
	if task, ok := l.next(); !ok || task.ID != "1" {
		t.Fatalf("first task %v %v, want 1", task, ok)
	}
	got := make(chan string)
	go func() {
		for {
			task, ok := l.next()
			if !ok {
				close(got)
				return
			}
			got <- task.ID
		}
	}()
	l.add([]tasks.Task{{ID: "2", Image: "b"}})
	if id := <-got; id != "2" {
		t.Errorf("added task %s handed out, want 2", id)
	}
	l.mu.Lock()
	l.pending = append(l.pending, tasks.Task{ID: "3", Image: "c"}, tasks.Task{ID: "4", Image: "c"})
	l.mu.Unlock()
	// The waiting worker may take 3 before take does: what take hands
	// back and what the worker gets are the two tasks, once each.
	taken := l.take(func(tasks.Task) bool { return true })
	l.close()
	var out []string
	for id := range got {
		out = append(out, id)
	}
	for _, task := range taken {
		out = append(out, task.ID)
	}
	slices.Sort(out)
	if !slices.Equal(out, []string{"3", "4"}) {
		t.Errorf("handed out and taken back %v, want 3 and 4 once each", out)
	}
}

// take takes back the pending tasks it picks, in order, and leaves the
// rest to be handed out in theirs.
func TestLanesTake(t *testing.T) {
	var ts []tasks.Task
	for i, img := range []string{"a", "b", "a", "c"} {
		ts = append(ts, tasks.Task{ID: img + strconv.Itoa(i), Image: img})
	}
	l, stop := newLanes(context.Background(), ts, false)
	defer stop()
	ids := func(ts []tasks.Task) (out []string) {
		for _, t := range ts {
			out = append(out, t.ID)
		}
		return out
	}
	taken := l.take(func(t tasks.Task) bool { return t.Image == "a" })
	var left []tasks.Task
	for task, ok := l.next(); ok; task, ok = l.next() {
		left = append(left, task)
	}
	if got, want := ids(taken), []string{"a0", "a2"}; !slices.Equal(got, want) {
		t.Errorf("taken %v, want %v", got, want)
	}
	if got, want := ids(left), []string{"b1", "c3"}; !slices.Equal(got, want) {
		t.Errorf("handed out after take %v, want %v", got, want)
	}
}
