// Package v1alpha1 is the sandbox-fleet.io/v1alpha1 API: SandboxPolicy, the
// cluster admin's policy for sandbox Pods, which asrl-webhook applies;
// NodeImageCache, what one node's runtime holds, which its
// asrl-prepull-agent writes; and PrepullJob, images for the agents to pull.
// docs/reference/crd describes every field.
//
// +kubebuilder:object:generate=true
// +groupName=sandbox-fleet.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API's group and version.
	GroupVersion = schema.GroupVersion{Group: "sandbox-fleet.io", Version: "v1alpha1"}
	// SchemeBuilder registers the API's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
