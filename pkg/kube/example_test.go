package kube_test

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// Transient tells a request worth sending again from one that will fail
// the same way.
func ExampleTransient() {
	claims := schema.GroupResource{Group: "extensions.agents.x-k8s.io", Resource: "sandboxclaims"}
	fmt.Println(kube.Transient(apierrors.NewServiceUnavailable("the API server is starting")))
	fmt.Println(kube.Transient(apierrors.NewTooManyRequests("slow down", 1)))
	fmt.Println(kube.Transient(apierrors.NewForbidden(claims, "t1", fmt.Errorf("RBAC"))))
	// Output:
	// true
	// true
	// false
}
