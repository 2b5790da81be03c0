package images_test

import (
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// Rules send images to a mirror by registry or path prefix; the first
// that matches wins.
func ExampleRewrite() {
	rule, err := images.ParseRule("docker.io/swebench=mirror.example.com/swe")
	if err != nil {
		panic(err)
	}
	for _, img := range []string{"swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest", "python:3.12"} {
		out, rewritten, err := images.Rewrite([]images.Rule{rule}, img)
		if err != nil {
			panic(err)
		}
		fmt.Println(out, rewritten)
	}
	// Output:
	// mirror.example.com/swe/sweb.eval.x86_64.astropy_1776_astropy-12907:latest true
	// python:3.12 false
}

// Normalize writes an image reference in full, as the kubelet reads it.
func ExampleNormalize() {
	full, err := images.Normalize("busybox:1.36")
	if err != nil {
		panic(err)
	}
	fmt.Println(full, images.Familiar(full))
	// Output: docker.io/library/busybox:1.36 busybox:1.36
}
