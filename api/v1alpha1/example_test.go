package v1alpha1_test

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// A PrepullJob asks the agents of the selected nodes to pull images
// ahead of a sweep; cluster admins create them (or `kubectl sandbox-fleet
// prepull`).
func ExamplePrepullJob() {
	job := v1alpha1.PrepullJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PrepullJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "sweep-1", Namespace: "rl"},
		Spec: v1alpha1.PrepullJobSpec{
			Images:       []string{"docker.io/swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"},
			NodeSelector: map[string]string{"sandbox-fleet.io/sandbox-node": "true"},
		},
	}
	out, err := yaml.Marshal(job)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(out))
	// Output:
	// apiVersion: sandbox-fleet.io/v1alpha1
	// kind: PrepullJob
	// metadata:
	//   name: sweep-1
	//   namespace: rl
	// spec:
	//   images:
	//   - docker.io/swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest
	//   nodeSelector:
	//     sandbox-fleet.io/sandbox-node: "true"
	// status: {}
}
