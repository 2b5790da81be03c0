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
	"strings"
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
		if torn(err) {
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

// torn reports whether a line failed to decode only because it ends early.
func torn(err error) bool {
	var syntax *json.SyntaxError
	return errors.As(err, &syntax) && syntax.Offset > 0 && strings.HasPrefix(syntax.Error(), "unexpected end of JSON input")
}

// Writer appends results to a file.
type Writer struct {
	mu   sync.Mutex
	file *os.File
	enc  *json.Encoder
}

// Create opens path for appending results, creating it if need be.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the results file: %w", err)
	}
	// A torn last line from a killed run would glue onto the next result.
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if r, err := os.Open(path); err == nil {
			if _, err := r.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
				_, _ = f.Write([]byte("\n"))
			}
			r.Close()
		}
	}
	return &Writer{file: f, enc: json.NewEncoder(f)}, nil
}

// Write appends one result as a line.
func (w *Writer) Write(r fleet.Result) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enc.Encode(r)
}

// Close flushes the file to disk and closes it.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return errors.Join(w.file.Sync(), w.file.Close())
}
