package loadtest

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/report"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

func TestBatchTasks(t *testing.T) {
	mirror, err := images.ParseRule("example.com=mirror.local/ex")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		batch   Batch
		rewrite []images.Rule
		ids     []string
		images  []string
		err     string
	}{
		{name: "images by index", batch: Batch{Images: []string{"example.com/bench:img{i}"}, Count: 2, TasksPerImage: 2},
			ids:    []string{"img0000-t0", "img0000-t1", "img0001-t0", "img0001-t1"},
			images: []string{"example.com/bench:img0", "example.com/bench:img0", "example.com/bench:img1", "example.com/bench:img1"}},
		{name: "zero-padded", batch: Batch{Images: []string{"example.com/bench:img{i:03d}"}, Count: 2, TasksPerImage: 1},
			ids: []string{"img0000-t0", "img0001-t0"}, images: []string{"example.com/bench:img000", "example.com/bench:img001"}},
		{name: "a template makes one image by default", batch: Batch{Images: []string{"example.com/b:{i}"}, TasksPerImage: 1},
			ids: []string{"img0000-t0"}, images: []string{"example.com/b:0"}},
		{name: "one image needs no placeholder", batch: Batch{Images: []string{"busybox:1.36"}, TasksPerImage: 3},
			ids: []string{"img0000-t0", "img0000-t1", "img0000-t2"}, images: []string{"busybox:1.36", "busybox:1.36", "busybox:1.36"}},
		{name: "images by name", batch: Batch{Images: []string{"busybox:1.36", "python:3.12"}, Count: 2, TasksPerImage: 1},
			ids: []string{"img0000-t0", "img0001-t0"}, images: []string{"busybox:1.36", "python:3.12"}},
		{name: "mirrored", batch: Batch{Images: []string{"example.com/b:{i}"}, TasksPerImage: 1}, rewrite: []images.Rule{mirror},
			ids: []string{"img0000-t0"}, images: []string{"mirror.local/ex/b:0"}},
		{name: "many images, one name", batch: Batch{Images: []string{"busybox:1.36"}, Count: 3, TasksPerImage: 1}, err: `image "busybox:1.36" has no {i}`},
		{name: "a count that is not the names'", batch: Batch{Images: []string{"busybox", "python"}, Count: 3, TasksPerImage: 1}, err: "3 images asked for, 2 named"},
		{name: "a template among names", batch: Batch{Images: []string{"busybox", "b:{i}"}, TasksPerImage: 1}, err: "either one name with {i} or names without"},
		{name: "no tasks", batch: Batch{Images: []string{"busybox"}, TasksPerImage: 0}, err: "both must be at least 1"},
		{name: "no images", batch: Batch{TasksPerImage: 1}, err: "both must be at least 1"},
		{name: "a bad reference", batch: Batch{Images: []string{"Bad Image:{i}"}, Count: 2, TasksPerImage: 1}, err: "--image, task 1"},
	} {
		ts, err := tt.batch.Tasks(tt.rewrite)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want one with %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var ids, imgs []string
		for _, task := range ts {
			ids, imgs = append(ids, task.ID), append(imgs, task.Image)
		}
		if !slices.Equal(ids, tt.ids) || !slices.Equal(imgs, tt.images) {
			t.Errorf("%s: ids %v images %v, want %v %v", tt.name, ids, imgs, tt.ids, tt.images)
		}
	}
}

func cell(strategy string, recycle bool, concurrency int) Cell {
	return Cell{Mode: Mode{Strategy: strategy, Recycle: recycle}, Concurrency: concurrency}
}

func TestParseModes(t *testing.T) {
	for _, tt := range []struct {
		names      []string
		recycleAll bool
		want       []string
		err        string
	}{
		{[]string{"naive", "pipelined+recycle"}, false, []string{"naive", "pipelined+recycle"}, ""},
		{[]string{"all"}, false, config.Strategies, ""},
		{[]string{"naive", "naive"}, false, []string{"naive", "naive"}, ""},
		{[]string{"naive", "sliding+recycle"}, true, []string{"naive+recycle", "sliding+recycle"}, ""},
		{[]string{"naive", "fastest"}, false, nil, `unknown strategy "fastest"`},
		{[]string{"reuse"}, false, nil, "each with +recycle"},
		{[]string{"naive+reuse"}, false, nil, `unknown strategy "naive+reuse"`},
	} {
		modes, err := ParseModes(tt.names, tt.recycleAll)
		var got []string
		for _, m := range modes {
			got = append(got, m.Name())
		}
		if !slices.Equal(got, tt.want) || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ParseModes(%v, %v) = %v, %v; want %v, error with %q", tt.names, tt.recycleAll, got, err, tt.want, tt.err)
		}
	}
}

func TestCells(t *testing.T) {
	got := Cells([]Mode{{Strategy: "naive"}, {Strategy: "pipelined", Recycle: true}}, []int{4, 16})
	want := []Cell{cell("naive", false, 4), cell("naive", false, 16), cell("pipelined", true, 4), cell("pipelined", true, 16)}
	if !slices.Equal(got, want) {
		t.Errorf("Cells = %v, want %v", got, want)
	}
	if id := RunID("lt", 3, want[3]); id != "lt-4-pipelined-recycle-c16" {
		t.Errorf("RunID = %s", id)
	}
	if name := want[3].Name(); name != "pipelined+recycle at concurrency 16" {
		t.Errorf("Name = %s", name)
	}
}

func result(ok, warm bool, sandbox string, claim float64) fleet.Result {
	return fleet.Result{OK: ok, Warm: warm, Sandbox: sandbox, Phases: map[string]float64{"claim": claim}}
}

// Time to a sandbox counts only tasks that got one; warm share and
// requests are over every task.
func TestMeasure(t *testing.T) {
	results := []fleet.Result{
		result(true, true, "s1", 0.1), result(true, true, "s2", 0.2), result(true, false, "s3", 3.0),
		result(false, false, "", 60), // never got a sandbox
	}
	rep := report.Report{WallSeconds: 10, Claims: 5, SandboxesPeak: 6}
	row := Measure(cell("sliding", false, 2), rep, results, 42)
	want := Row{Cell: cell("sliding", false, 2), WallSeconds: 10, TimeToSandboxP50: 0.2, TimeToSandboxP99: 3.0, WarmShare: 0.5,
		ClaimsPerSecond: 0.5, PeakSandboxes: 6, RequestsPerTask: 10.5, OK: 3, Tasks: 4}
	row.Report = nil
	if row != want {
		t.Errorf("Measure =\n%+v\nwant\n%+v", row, want)
	}
	if empty := Measure(cell("naive", false, 1), report.Report{}, nil, 0); empty.WarmShare != 0 || empty.ClaimsPerSecond != 0 || empty.RequestsPerTask != 0 {
		t.Errorf("a run with no task: %+v", empty)
	}
}

func TestWriteTable(t *testing.T) {
	rep := report.Report{}
	rows := []Row{
		{Cell: cell("naive", false, 4), WallSeconds: 31.25, TimeToSandboxP50: 0.04, TimeToSandboxP99: 0.31, WarmShare: 1,
			ClaimsPerSecond: 0.5, PeakSandboxes: 8, RequestsPerTask: 9.5, OK: 16, Tasks: 16, Report: &rep},
		{Cell: cell("pipelined", false, 16), WallSeconds: 12.5, TimeToSandboxP50: 1.5, TimeToSandboxP99: 4.25, WarmShare: 0.375,
			ClaimsPerSecond: 1.3, PeakSandboxes: 20, RequestsPerTask: 11.25, OK: 15, Tasks: 16, Report: &rep,
			Error: "tearing down run lt-pipelined-c16: timed out"},
		{Cell: cell("pipelined", true, 16), WallSeconds: 8.75, TimeToSandboxP50: 0.02, TimeToSandboxP99: 1.5, WarmShare: 0.875,
			ClaimsPerSecond: 0.5, PeakSandboxes: 4, RequestsPerTask: 5.5, OK: 16, Tasks: 16, Report: &rep},
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "table", b.String())
}
