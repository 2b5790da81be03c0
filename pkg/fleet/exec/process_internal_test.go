package exec

import "testing"

// A process writing a byte at a time keeps no more than MaxKept of memory
// for its readers, counting each event's cost as well as its byte: the
// events kept are bounded, not only their bytes.
func TestProcessKeepsBoundedEvents(t *testing.T) {
	p := &Process{changed: make(chan struct{})}
	w := p.writer("stdout")
	for range MaxKept / eventCost * 3 {
		if _, err := w.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(p.events); n > MaxKept/(eventCost+1)+1 {
		t.Errorf("%d one-byte events kept, want at most %d", n, MaxKept/(eventCost+1)+1)
	}
	if p.kept > MaxKept {
		t.Errorf("kept %d, over MaxKept %d", p.kept, MaxKept)
	}
	if p.dropped == 0 {
		t.Error("nothing was let go")
	}
}
