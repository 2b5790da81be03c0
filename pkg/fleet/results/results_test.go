package results

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet"
)

func TestResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.jsonl")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zero, one := 0, 1
	for _, r := range []fleet.Result{
		{ID: "a", Epoch: 1, OK: true, ExitCode: &zero},
		{ID: "b", Epoch: 1, ExitCode: &one, Error: "exit code 1"},
		{ID: "c", Epoch: 1, Error: "claim failed"},
		{ID: "a", Epoch: 2, OK: true, ExitCode: &zero},
	} {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// A run killed mid-write leaves a torn line.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"id":"d","epoch":1,"exi`); err != nil {
		t.Fatal(err)
	}
	f.Close()

	done, err := Done(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[Key]bool{{1, "a"}: true, {1, "b"}: true, {2, "a"}: true}
	if len(done) != len(want) {
		t.Errorf("Done = %v, want %v", done, want)
	}
	for k := range want {
		if !done[k] {
			t.Errorf("Done lacks %v", k)
		}
	}

	// Appending after the torn line starts a fresh one.
	w, err = Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(fleet.Result{ID: "d", Epoch: 1, ExitCode: &zero}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if done, err := Done(path); err != nil || !done[Key{1, "d"}] {
		t.Errorf("after a torn line: Done = %v, %v; want d done", done, err)
	}
	// A line that is not a result at all is an error naming it.
	if err := os.WriteFile(path, []byte("{\"id\":\"a\",\"exitCode\":0}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Done(path); err == nil || !strings.Contains(err.Error(), "results.jsonl:2:") {
		t.Errorf("a garbled line: Done = %v, want an error naming line 2", err)
	}
}

func TestDoneWithoutFile(t *testing.T) {
	done, err := Done(filepath.Join(t.TempDir(), "none.jsonl"))
	if err != nil || len(done) != 0 {
		t.Errorf("Done(missing) = %v, %v; want nothing done", done, err)
	}
}
