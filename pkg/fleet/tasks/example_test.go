package tasks_test

import (
	"fmt"
	"strings"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// Task files are JSONL (generic rows, SWE-bench or R2E-Gym ones) or image
// lists; "-" reads stdin. Rewrite rules send images to a mirror.
func ExampleLoad() {
	rows := `{"id": "t1", "image": "python:3.12"}
{"instance_id": "django__django-11099"}
`
	ts, err := tasks.Load([]string{"-"}, strings.NewReader(rows), tasks.Options{
		Rewrite: []images.Rule{{From: "docker.io", To: "mirror.example.com/hub"}},
	})
	if err != nil {
		panic(err)
	}
	for _, t := range ts {
		fmt.Println(t.ID, t.Image)
	}
	// Output:
	// t1 mirror.example.com/hub/library/python:3.12
	// django__django-11099 mirror.example.com/hub/swebench/sweb.eval.x86_64.django_1776_django-11099:latest
}
