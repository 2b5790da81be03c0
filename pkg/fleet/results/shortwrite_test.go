package results

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
)

// fullDisk is a results file whose next write stores half its bytes and
// fails, as on a disk that fills mid-line; truncating fails too when
// stuck.
type fullDisk struct {
	appendFile
	fail, stuck bool
}

func (d *fullDisk) Write(b []byte) (int, error) {
	if !d.fail {
		return d.appendFile.Write(b)
	}
	d.fail = false
	n, _ := d.appendFile.Write(b[:len(b)/2])
	return n, syscall.ENOSPC
}

func (d *fullDisk) Truncate(size int64) error {
	if d.stuck {
		return syscall.EIO
	}
	return d.appendFile.Truncate(size)
}

// A write that fails part-way leaves no fragment glued to the next
// result: the file resumes with every result written whole.
func TestShortWriteResumes(t *testing.T) {
	for _, stuck := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "results.jsonl")
		w, err := Create(path)
		if err != nil {
			t.Fatal(err)
		}
		disk := &fullDisk{appendFile: w.file, stuck: stuck}
		w.file = disk
		code := 0
		if err := w.Write(fleet.Result{ID: "a", ExitCode: &code}); err != nil {
			t.Fatal(err)
		}
		disk.fail = true
		if err := w.Write(fleet.Result{ID: "lost", ExitCode: &code}); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("the short write: %v, want ENOSPC", err)
		}
		if err := w.Write(fleet.Result{ID: "b", ExitCode: &code}); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		done, err := Done(path)
		if err != nil {
			t.Fatalf("truncate failing %v: the file does not resume: %v", stuck, err)
		}
		if len(done) != 2 || !done[Key{1, "a"}] || !done[Key{1, "b"}] {
			t.Errorf("truncate failing %v: done %v, want a and b", stuck, done)
		}
	}
}
