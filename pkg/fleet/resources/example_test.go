package resources_test

import (
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
)

// The template and warm pool a run keeps of an image: named after the
// image's tail and a hash of the run and the image, so that a user finds
// them (kubectl get sandboxwarmpools), with the sandbox container.
func ExampleTemplate() {
	tmpl, err := resources.Template("rl", "run-1", "docker.io/swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest", resources.PodSpec{})
	if err != nil {
		panic(err)
	}
	pool := resources.WarmPool(tmpl, 4)
	fmt.Println(pool.Name, *pool.Spec.Replicas)
	fmt.Println(tmpl.Spec.PodTemplate.Spec.Containers[0].Name)
	// Output:
	// 64-astropy-1776-astropy-12907-c8bf8c2fb5 4
	// sandbox
}
