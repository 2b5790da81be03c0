package tasks

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// load writes content to a file named tasks.jsonl and loads it.
func load(t *testing.T, content string, opts Options) ([]Task, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Load([]string{path}, nil, opts)
	for i := range got {
		got[i].Source = strings.TrimPrefix(got[i].Source, filepath.Dir(path)+"/")
	}
	return got, err
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name, content string
		opts          Options
		want          []Task
	}{{
		name:    "generic rows",
		content: `{"id": "t1", "image": "busybox:1.36", "prompt": "p"}` + "\n\n" + `{"id": 2, "image": "busybox:1.37"}`,
		want: []Task{
			{ID: "t1", Image: "busybox:1.36", Metadata: map[string]any{"prompt": "p"}, Source: "tasks.jsonl:1"},
			{ID: "2", Image: "busybox:1.37", Source: "tasks.jsonl:3"},
		},
	}, {
		name:    "SWE-bench row with docker_image",
		content: `{"instance_id": "django__django-11099", "docker_image": "swebench/sweb.eval.x86_64.django_1776_django-11099:latest", "repo": "django/django"}`,
		want: []Task{{ID: "django__django-11099", Image: "swebench/sweb.eval.x86_64.django_1776_django-11099:latest",
			Metadata: map[string]any{"repo": "django/django"}, Source: "tasks.jsonl:1"}},
	}, {
		name:    "SWE-bench row, image derived from the instance id",
		content: `{"instance_id": "Astropy__astropy-12907", "base_commit": "abc"}`,
		want: []Task{{ID: "Astropy__astropy-12907", Image: "docker.io/swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest",
			Metadata: map[string]any{"base_commit": "abc"}, Source: "tasks.jsonl:1"}},
	}, {
		name:    "R2E-Gym row",
		content: `{"repo_name": "orange3", "commit_hash": "0123456789abcdef", "docker_image": "namanjain12/orange3_final:0123456789abcdef"}`,
		want: []Task{{ID: "orange3-0123456789ab", Image: "namanjain12/orange3_final:0123456789abcdef",
			Metadata: map[string]any{"repo_name": "orange3", "commit_hash": "0123456789abcdef"}, Source: "tasks.jsonl:1"}},
	}, {
		name:    "chosen fields",
		content: `{"task": "a", "img": "busybox", "image": "ignored"}`,
		opts:    Options{IDField: "task", ImageField: "img"},
		want:    []Task{{ID: "a", Image: "busybox", Metadata: map[string]any{"image": "ignored"}, Source: "tasks.jsonl:1"}},
	}, {
		name:    "image list with comments and repeats",
		content: "# images\nbusybox:1.36\n\nbusybox:1.36\nghcr.io/org/img:v1\n",
		want: []Task{
			{ID: "0", Image: "busybox:1.36", Source: "tasks.jsonl:2"},
			{ID: "1", Image: "busybox:1.36", Source: "tasks.jsonl:4"},
			{ID: "2", Image: "ghcr.io/org/img:v1", Source: "tasks.jsonl:5"},
		},
	}, {
		name:    "rewrite keeps the original",
		content: `{"id": "t", "image": "busybox:1.36"}`,
		opts:    Options{Rewrite: []images.Rule{{From: "docker.io", To: "mirror.local/hub"}}},
		want: []Task{{ID: "t", Image: "mirror.local/hub/library/busybox:1.36", OriginalImage: "busybox:1.36",
			Source: "tasks.jsonl:1"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := load(t, tt.content, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Every malformed file is rejected whole, with file:line and what to do.
func TestLoadRejects(t *testing.T) {
	tests := []struct {
		name, content, want string
		opts                Options
	}{
		{"malformed JSON", `{"id": "a", "image": "busybox"` + "\n", "tasks.jsonl:1: invalid JSON", Options{}},
		{"not an object", `{"id": "a", "image": "x"}` + "\n[1, 2]\n", "tasks.jsonl:2: invalid JSON", Options{}},
		{"no id", `{"image": "busybox"}`, `tasks.jsonl:1: no task id: the row has no "id", "instance_id"`, Options{}},
		{"no image", `{"id": "a"}`, `tasks.jsonl:1: task "a": no image`, Options{}},
		{"empty image", `{"id": "a", "image": ""}`, `tasks.jsonl:1: task "a": no image`, Options{}},
		{"image not a string", `{"id": "a", "image": 7}`, `tasks.jsonl:1: task "a": the image "image" is a number, not a string`, Options{}},
		{"id field missing", `{"id": "a", "image": "busybox"}`, `no string or number field "task" (--id-field)`, Options{IDField: "task"}},
		{"image field missing", `{"id": "a", "image": "busybox"}`, `no string field "img" (--image-field)`, Options{ImageField: "img"}},
		{"id is an object", `{"id": {"x": 1}, "image": "busybox"}`, `tasks.jsonl:1: the task id "id" is an object, not a string or number`, Options{}},
		{"id is a list", `{"id": ["x"], "image": "busybox"}`, `tasks.jsonl:1: the task id "id" is a list`, Options{}},
		{"another row after the object", `{"id":"a","image":"busybox:1.36"} {"id":"zzz","image":"Bad Image"}`, "tasks.jsonl:1: invalid JSON: text after the JSON object", Options{}},
		{"garbage after the object", `{"id":"a","image":"busybox:1.36"}garbage`, "tasks.jsonl:1: invalid JSON", Options{}},
		{"a key twice", `{"id":"a","image":"busybox","image":"alpine"}`, `tasks.jsonl:1: invalid JSON: the key "image" appears twice`, Options{}},
		{"a line over the limit", `{"id":"a","image":"busybox"}` + "\n" + `{"id":"b","image":"busybox","patch":"` + strings.Repeat("x", maxLine) + `"}`, "tasks.jsonl:2: the line is longer than 16 MiB", Options{}},
		{"invalid image", `{"id": "a", "image": "Busybox:UPPER:case"}`, `tasks.jsonl:1: task "a": invalid image reference "Busybox:UPPER:case"`, Options{}},
		{"invalid image in a list", "busybox\nnot a valid image\n", `tasks.jsonl:2: task "1": invalid image reference`, Options{}},
		{"duplicate id", `{"id": "a", "image": "busybox"}` + "\n" + `{"id": "a", "image": "busybox"}`, `tasks.jsonl:2: duplicate task id "a" (first at `, Options{}},
		{"id with a slash", `{"id": "org/task", "image": "busybox"}`, `tasks.jsonl:1: task id "org/task" cannot be a Kubernetes label value`, Options{}},
		{"id too long", `{"id": "` + strings.Repeat("a", 64) + `", "image": "busybox"}`, "cannot be a Kubernetes label value (must be no more than 63 bytes)", Options{}},
		{"id ends with a dash", `{"id": "a-", "image": "busybox"}`, `task id "a-" cannot be a Kubernetes label value`, Options{}},
		{"empty file", "\n# nothing\n", "no tasks in", Options{}},
		{"second row bad, first good", `{"id": "a", "image": "busybox"}` + "\n" + `{"id": "b"}`, `tasks.jsonl:2: task "b": no image`, Options{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := load(t, tt.content, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load = %+v, %v; want an error containing %q", got, err, tt.want)
			}
			if got != nil {
				t.Errorf("Load returned tasks with an error: %+v", got)
			}
		})
	}
}

// A file saved with a UTF-8 byte-order mark reads as the JSONL it is.
func TestLoadSkipsAByteOrderMark(t *testing.T) {
	got, err := load(t, "\uFEFF"+`{"id": "a", "image": "busybox"}`+"\n", Options{})
	if err != nil || len(got) != 1 || got[0].ID != "a" || got[0].Image != "busybox" {
		t.Fatalf("Load = %+v, %v; want task a of busybox", got, err)
	}
}

// All problems are reported at once, not one per attempt.
func TestLoadReportsEveryProblem(t *testing.T) {
	_, err := load(t, `{"id": "a"}`+"\n"+`{"image": "b"}`+"\n"+"{\n", Options{})
	for _, want := range []string{"tasks.jsonl:1:", "tasks.jsonl:2:", "tasks.jsonl:3:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

func TestIDsAreUniqueAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	os.WriteFile(a, []byte(`{"id": "x", "image": "busybox"}`), 0o644)
	os.WriteFile(b, []byte(`{"id": "x", "image": "busybox"}`), 0o644)
	if _, err := Load([]string{a, b}, nil, Options{}); err == nil || !strings.Contains(err.Error(), b+`:1: duplicate task id "x" (first at `+a+":1)") {
		t.Errorf("err = %v", err)
	}
	if got, err := Load([]string{"-"}, strings.NewReader("busybox\n"), Options{}); err != nil || got[0].Source != "<stdin>:1" {
		t.Errorf("stdin: %+v, %v", got, err)
	}
}

func TestCheck(t *testing.T) {
	rule, err := images.ParseRule("docker.io=mirror.example/hub")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{"old": "tasks.jsonl:1"}
	got, err := Check("AddTasks", []Task{{ID: "a", Image: "docker.io/library/python:3"}, {ID: "b", Image: "quay.io/x/y:1"}}, seen, []images.Rule{rule})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Image != "mirror.example/hub/library/python:3" || got[0].OriginalImage != "docker.io/library/python:3" || got[1].Image != "quay.io/x/y:1" {
		t.Errorf("Check = %+v", got)
	}
	if seen["a"] != "AddTasks, task 1" {
		t.Errorf("seen = %v", seen)
	}
	for _, tc := range []struct {
		name string
		ts   []Task
		want string
	}{
		{"duplicate of a known task", []Task{{ID: "old", Image: "x:1"}}, `AddTasks, task 1: duplicate task id "old" (first at tasks.jsonl:1)`},
		{"duplicate within", []Task{{ID: "c", Image: "x:1"}, {ID: "c", Image: "x:1"}}, `AddTasks, task 2: duplicate task id "c" (first at AddTasks, task 1)`},
		{"no image", []Task{{ID: "d"}}, `AddTasks, task 1: task "d" has no image`},
		{"bad image", []Task{{ID: "e", Image: "Bad Image"}}, `AddTasks, task 1: task "e": invalid image reference "Bad Image"`},
		{"bad id", []Task{{ID: "", Image: "x:1"}}, `AddTasks, task 1: task id "" cannot be a Kubernetes label value`},
	} {
		_, err := Check("AddTasks", tc.ts, map[string]string{"old": "tasks.jsonl:1"}, nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: Check error = %v, want it to start with %q", tc.name, err, tc.want)
		}
	}
}

// Rows given as data read as the same lines of a task file do: the same
// ids, images and metadata, named by their index instead of file:line.
func TestRowsReadAsAFileDoes(t *testing.T) {
	rows := []string{
		`{"instance_id": "django__django-11099", "repo": "django/django", "FAIL_TO_PASS": "[\"t\"]"}`,
		`{"repo_name": "orange3", "commit_hash": "0123456789abcdef", "docker_image": "namanjain12/orange3_final:0123456789abcdef"}`,
		`{"id": 7, "image": "busybox:1.36", "prompt": "p"}`,
	}
	rule := []images.Rule{{From: "docker.io", To: "mirror.local/hub"}}
	fromFile, err := load(t, strings.Join(rows, "\n"), Options{Rewrite: rule})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	got, err := Rows("rows", rows, seen, Options{Rewrite: rule})
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if want := fmt.Sprintf("rows[%d]", i); got[i].Source != want || seen[got[i].ID] != want {
			t.Errorf("task %d is named %q (seen %q), want %q", i, got[i].Source, seen[got[i].ID], want)
		}
		got[i].Source = fromFile[i].Source
	}
	if !reflect.DeepEqual(got, fromFile) {
		t.Errorf("Rows = %+v\nLoad = %+v", got, fromFile)
	}

	// An image's task id is its place among the session's tasks.
	more, err := Rows("rows", []string{" busybox:1.37 "}, seen, Options{})
	if err != nil || len(more) != 1 || more[0].ID != "3" || more[0].Image != "busybox:1.37" {
		t.Errorf("an image row after 3 tasks = %+v, %v", more, err)
	}
}

func TestRowsRejects(t *testing.T) {
	opts := Options{IDOption: "id_field", ImageOption: "image_field"}
	for _, tc := range []struct {
		name string
		rows []string
		opts Options
		want []string
	}{
		{"every problem, by index", []string{`{"id": "a", "image": "busybox"}`, `{"id": "b"}`, ``, `{"id": "a", "image": "x"}`, `{not json`},
			opts, []string{`rows[1]: task "b": no image: the row has no "image", "docker_image" or SWE-bench "instance_id"; name the image field with image_field`,
				`rows[2]: an empty row: give a JSON object or an image`,
				`rows[3]: duplicate task id "a" (first at rows[0])`,
				`rows[4]: invalid JSON`}},
		{"the option's own name", []string{`{"id": "a", "image": "busybox"}`}, Options{IDField: "task", IDOption: "id_field"},
			[]string{`rows[0]: no task id: the row has no string or number field "task" (id_field)`}},
		{"a known id", []string{`{"id": "old", "image": "busybox"}`}, opts, []string{`rows[0]: duplicate task id "old" (first at tasks.jsonl:1)`}},
		{"a bad image", []string{"Not An Image"}, opts, []string{`rows[0]: task "1": invalid image reference "Not An Image"`}},
	} {
		seen := map[string]string{"old": "tasks.jsonl:1"}
		got, err := Rows("rows", tc.rows, seen, tc.opts)
		if err == nil || got != nil {
			t.Errorf("%s: Rows = %+v, want an error", tc.name, got)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q\nlacks %q", tc.name, err, want)
			}
		}
	}
}
