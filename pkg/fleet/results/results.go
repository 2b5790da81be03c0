// Package results is the run's result file: one JSON line per finished
// task, appended as tasks finish, so that a run stopped at any point —
// even killed mid-line — can be resumed without doing a task twice.
package results

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
)

// Key names a task in an epoch.
type Key struct {
	Epoch int
	ID    string
}

// Read reads the result file at path; a missing file holds no results. A
// torn line, left by a killed run, is skipped; any other malformed line is
// an error naming it.
func Read(path string) ([]fleet.Result, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the results file: %w", err)
	}
	defer f.Close()
	var out []fleet.Result
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var r fleet.Result
		err := json.Unmarshal(sc.Bytes(), &r)
		if torn(err, sc.Bytes()) {
			continue
		}
		if err != nil || r.ID == "" {
			return nil, fmt.Errorf("%s:%d: not a result line (%v): move the file away or fix the line to resume", path, line, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}

// Done returns the tasks of the result file at path whose work ran to
// completion (whatever its exit code). Tasks that never got to run — a
// claim that failed, a lost sandbox — are not done, so a rerun retries
// them.
func Done(path string) (map[Key]bool, error) {
	rs, err := Read(path)
	if err != nil {
		return nil, err
	}
	done := map[Key]bool{}
	for _, r := range rs {
		if r.ExitCode != nil {
			done[Key{Epoch: max(1, r.Epoch), ID: r.ID}] = true
		}
	}
	return done, nil
}

// torn reports whether line failed to decode only because it ends early:
// the syntax error is at its end (mid-value, or mid-literal, which the
// decoder finds one byte past it).
func torn(err error, line []byte) bool {
	var syntax *json.SyntaxError
	return errors.As(err, &syntax) && syntax.Offset > 0 && syntax.Offset >= int64(len(line))
}

// Writer appends results to a file.
type Writer struct {
	mu   sync.Mutex
	file appendFile
	// size is how much of the file holds whole lines; torn is set when a
	// failed write may have left part of a line past it.
	size int64
	torn bool
}

// appendFile is the results file as Writer uses it (an *os.File opened
// to append).
type appendFile interface {
	Write([]byte) (int, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

// Create opens path for appending results, creating it if need be.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the results file: %w", err)
	}
	w := &Writer{file: f}
	// A torn last line from a killed run would glue onto the next result.
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		w.size = st.Size()
		last := make([]byte, 1)
		if r, err := os.Open(path); err == nil {
			w.torn = func() bool { _, err := r.ReadAt(last, st.Size()-1); return err == nil && last[0] != '\n' }()
			r.Close()
		}
	}
	return w, nil
}

// Write appends one result as a line. A write that fails part-way (a
// full disk) is cut off the file, or, if that fails too, ended as a line
// of its own before the next result, which Read then skips: the file
// never holds a result glued to a fragment.
func (w *Writer) Write(r fleet.Result) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.torn {
		if _, err := w.file.Write([]byte("\n")); err != nil {
			return fmt.Errorf("writing the results file: %w", err)
		}
		w.torn = false
		w.size++
	}
	n, err := w.file.Write(line)
	if err != nil {
		if n > 0 {
			w.torn = w.file.Truncate(w.size) != nil
		}
		return fmt.Errorf("writing the results file: %w", err)
	}
	w.size += int64(n)
	return nil
}

// Close flushes the file to disk and closes it.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return errors.Join(w.file.Sync(), w.file.Close())
}
