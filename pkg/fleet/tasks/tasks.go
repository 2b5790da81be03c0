// Package tasks loads the tasks of a run: JSONL rows (generic, SWE-bench or
// R2E-Gym) or plain image lists. Every row is checked before anything is
// created, and every problem is reported with its file and line.
package tasks

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// Task is one unit of work: a sandbox of Image in which work runs.
type Task struct {
	ID    string `json:"id"`
	Image string `json:"image"`
	// OriginalImage is the image before a rewrite rule redirected it.
	OriginalImage string         `json:"originalImage,omitempty"`
	Metadata      map[string]any `json:"metadata,omitempty"`
	// Source is where the task was read, as file:line.
	Source string `json:"-"`
}

// Options says how to read rows and what to apply to them.
type Options struct {
	// IDField and ImageField name the row fields to use instead of the
	// recognised ones.
	IDField, ImageField string
	Rewrite             []images.Rule
	// IDOption and ImageOption are how the caller spells IDField and
	// ImageField in errors ("--id-field" and "--image-field" unless set).
	IDOption, ImageOption string
}

func (o Options) idOption() string    { return cmp.Or(o.IDOption, "--id-field") }
func (o Options) imageOption() string { return cmp.Or(o.ImageOption, "--image-field") }

// maxErrors bounds how many problems one load reports.
const maxErrors = 20

// Error is one problem with a task: Where names it (file:line, or its
// place in a request).
type Error struct {
	Where string
	Msg   string
}

func (e *Error) Error() string { return e.Where + ": " + e.Msg }

// Load reads tasks from files; "-" reads stdin. Task ids must be unique
// across all files. It returns every problem found (up to 20), joined.
func Load(paths []string, stdin io.Reader, opts Options) ([]Task, error) {
	l := loader{opts: opts, seen: map[string]string{}}
	for _, p := range paths {
		if p == "-" {
			l.read("<stdin>", stdin)
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("reading tasks: %w", err)
		}
		l.read(p, f)
		f.Close()
	}
	ts, err := l.result()
	if err == nil && len(ts) == 0 {
		return nil, fmt.Errorf("no tasks in %s", strings.Join(paths, ", "))
	}
	return ts, err
}

type loader struct {
	opts  Options
	tasks []Task
	errs  []error
	seen  map[string]string // task id -> where it was first read
}

func (l *loader) fail(where string, format string, args ...any) {
	if len(l.errs) < maxErrors {
		l.errs = append(l.errs, &Error{Where: where, Msg: fmt.Sprintf(format, args...)})
	}
}

// Check checks tasks given as data rather than read from a file — a
// session's AddTasks — as Load checks rows: valid ids unique among them and
// the ids already in seen (id -> where it came from, updated), images that
// rewrite applies to. Each is named as the n-th task of source.
func Check(source string, ts []Task, seen map[string]string, rewrite []images.Rule) ([]Task, error) {
	l := loader{opts: Options{Rewrite: rewrite}, seen: seen}
	for i, t := range ts {
		where := fmt.Sprintf("%s, task %d", source, i+1)
		if t.Image == "" {
			l.fail(where, "task %q has no image", t.ID)
			continue
		}
		if _, err := images.Normalize(t.Image); err != nil {
			l.fail(where, "task %q: %v", t.ID, err)
			continue
		}
		l.add(where, t)
	}
	return l.result()
}

// Rows reads tasks from rows given as data — a session's AddTasks — as
// Load reads a file's lines: a row that starts with "{" is a JSON object
// (generic, SWE-bench or R2E-Gym), another an image, whose task id is its
// place among the tasks seen. Ids must be unique among the rows and the
// ids in seen (id -> where it came from, updated). Each row is named
// source[i]; every problem is returned (up to 20), joined.
func Rows(source string, rows []string, seen map[string]string, opts Options) ([]Task, error) {
	l := loader{opts: opts, seen: seen}
	for i, text := range rows {
		where := fmt.Sprintf("%s[%d]", source, i)
		switch text = strings.TrimSpace(text); {
		case text == "":
			l.fail(where, "an empty row: give a JSON object or an image")
		case strings.HasPrefix(text, "{"):
			l.row(where, []byte(text))
		default:
			l.image(where, text)
		}
	}
	return l.result()
}

// result is what a load found: its tasks, or every problem in it.
func (l *loader) result() ([]Task, error) {
	if len(l.errs) == 0 {
		return l.tasks, nil
	}
	if len(l.errs) == maxErrors {
		l.errs = append(l.errs, errors.New("(more problems not shown)"))
	}
	return nil, errors.Join(l.errs...)
}

// image adds an image-list line's task.
func (l *loader) image(where, image string) {
	l.add(where, Task{ID: fmt.Sprint(len(l.seen)), Image: image})
}

// read takes a file as JSONL if its first content line is a JSON object,
// and as a list of images, one a line, otherwise. Blank lines and lines
// starting with # are skipped.
func (l *loader) read(file string, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	jsonl, decided := false, false
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			// A byte-order mark some editors write is no part of the row.
			text = strings.TrimPrefix(text, "\uFEFF")
		}
		text = strings.TrimSpace(text)
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if !decided {
			jsonl, decided = strings.HasPrefix(text, "{"), true
		}
		if jsonl {
			l.row(fmt.Sprintf("%s:%d", file, line), []byte(text))
		} else {
			l.image(fmt.Sprintf("%s:%d", file, line), text)
		}
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		l.fail(fmt.Sprintf("%s:%d", file, line+1), "the line is longer than %d MiB; split the row or move its large fields to files", maxLine>>20)
	case err != nil:
		l.errs = append(l.errs, fmt.Errorf("%s: %w", file, err))
	}
}

// maxLine bounds a task file's line: SWE-bench rows carry whole patches.
const maxLine = 16 << 20

// decodeRow decodes one JSONL row: a single JSON object, nothing after it,
// no key twice (encoding/json would silently keep the last).
func decodeRow(text []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if tok != json.Delim('{') {
		return nil, errors.New("a row must be a JSON object")
	}
	row := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // an object's keys are strings, or Token fails
		if _, dup := row[key]; dup {
			return nil, fmt.Errorf("the key %q appears twice", key)
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		row[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("text after the JSON object at offset %d: one object a line", dec.InputOffset())
	}
	return row, nil
}

func (l *loader) row(where string, text []byte) {
	row, err := decodeRow(text)
	if err != nil {
		l.fail(where, "invalid JSON: %v", err)
		return
	}
	id, idKeys, err := l.idOf(row)
	if err != nil {
		l.fail(where, "%v", err)
		return
	}
	image, imageKey, err := l.imageOf(row)
	if err != nil {
		l.fail(where, "task %q: %v", id, err)
		return
	}
	meta := maps.Clone(row)
	for _, k := range append(idKeys, imageKey) {
		delete(meta, k)
	}
	if len(meta) == 0 {
		meta = nil
	}
	l.add(where, Task{ID: id, Image: image, Metadata: meta})
}

// idOf finds the row's task id: the id field given, else "id", else SWE-bench's
// "instance_id", else R2E-Gym's repository and commit.
func (l *loader) idOf(row map[string]any) (string, []string, error) {
	if f := l.opts.IDField; f != "" {
		v, ok := scalar(row[f])
		if !ok {
			return "", nil, fmt.Errorf("no task id: the row has no string or number field %q (%s)", f, l.opts.idOption())
		}
		return v, []string{f}, nil
	}
	for _, f := range []string{"id", "instance_id"} {
		if v, ok := scalar(row[f]); ok {
			return v, []string{f}, nil
		} else if x, present := row[f]; present {
			return "", nil, fmt.Errorf("the task id %q is %s, not a string or number", f, kindOf(x))
		}
	}
	repo, okRepo := scalar(row["repo_name"])
	commit, okCommit := scalar(row["commit_hash"])
	if okRepo && okCommit {
		return strings.ReplaceAll(repo, "/", "__") + "-" + commit[:min(12, len(commit))], nil, nil
	}
	return "", nil, fmt.Errorf(`no task id: the row has no "id", "instance_id" or R2E-Gym "repo_name" and "commit_hash"; name the id field with %s`, l.opts.idOption())
}

// imageOf finds the row's image: the image field given, else "image", else
// "docker_image" (SWE-bench and R2E-Gym), else the image SWE-bench names
// after "instance_id".
func (l *loader) imageOf(row map[string]any) (string, string, error) {
	if f := l.opts.ImageField; f != "" {
		v, ok := row[f].(string)
		if !ok || v == "" {
			return "", "", fmt.Errorf("no image: the row has no string field %q (%s)", f, l.opts.imageOption())
		}
		return v, f, nil
	}
	for _, f := range []string{"image", "docker_image"} {
		if v, ok := row[f].(string); ok && v != "" {
			return v, f, nil
		} else if x, present := row[f]; present && !ok {
			return "", "", fmt.Errorf("the image %q is %s, not a string", f, kindOf(x))
		}
	}
	if id, ok := row["instance_id"].(string); ok && id != "" {
		return SWEBenchImage(id), "", nil
	}
	return "", "", fmt.Errorf(`no image: the row has no "image", "docker_image" or SWE-bench "instance_id"; name the image field with %s`, l.opts.imageOption())
}

// SWEBenchImage is the image SWE-bench publishes for an instance:
// swebench/sweb.eval.x86_64.<instance id, lower case> on Docker Hub, where
// "__" is spelled "_1776_" because Docker Hub does not allow it.
func SWEBenchImage(instanceID string) string {
	return "docker.io/swebench/sweb.eval.x86_64." + strings.ToLower(strings.ReplaceAll(instanceID, "__", "_1776_")) + ":latest"
}

func (l *loader) add(where string, t Task) {
	// Task ids label claims and results, so they must be valid label values.
	if errs := validation.IsValidLabelValue(t.ID); t.ID == "" || len(errs) > 0 {
		l.fail(where, "task id %q cannot be a Kubernetes label value (%s); choose another field with %s", t.ID, strings.Join(errs, "; "), l.opts.idOption())
		return
	}
	if first, ok := l.seen[t.ID]; ok {
		l.fail(where, "duplicate task id %q (first at %s)", t.ID, first)
		return
	}
	rewritten, ok, err := images.Rewrite(l.opts.Rewrite, t.Image)
	if err != nil {
		l.fail(where, "task %q: %v", t.ID, err)
		return
	}
	if ok {
		t.OriginalImage, t.Image = t.Image, rewritten
	}
	l.seen[t.ID] = where
	t.Source = where
	l.tasks = append(l.tasks, t)
}

// kindOf names the JSON kind of a decoded value, for errors.
func kindOf(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	default:
		return "a string"
	}
}

// scalar returns a string or JSON number field as a string.
func scalar(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, v != ""
	case json.Number:
		return v.String(), true
	default:
		return "", false
	}
}
