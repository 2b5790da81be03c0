package nodecache

import (
	"fmt"
	"strings"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// PullLimits are what a node agent lets PrepullJobs make its node do,
// set by the cluster admin on the agent's DaemonSet. A PrepullJob is
// namespaced: whoever may create one in some namespace must not make the
// nodes pull what the admin did not allow — a private image pulled with
// the node's credentials serves every IfNotPresent Pod after it, pull
// secret or not — nor fill their disks.
type PullLimits struct {
	// AllowedRegistries are the registries, or registry and repository
	// prefixes, that jobs may pull from; none: nothing.
	AllowedRegistries []string
	// MaxHighWaterPercent caps every job's diskHighWaterPercent; 0 is no
	// cap.
	MaxHighWaterPercent int32
}

// Refusal says why image may not be pulled for a job, "" when it may.
func (l PullLimits) Refusal(image string) string {
	if len(l.AllowedRegistries) == 0 {
		return "this node's asrl-prepull-agent pulls from no registry: the cluster admin lists those it may in its --allowed-registries"
	}
	if images.WithinAny(image, l.AllowedRegistries) {
		return ""
	}
	return fmt.Sprintf("%s is from none of the registries this node's asrl-prepull-agent may pull from (%s, its --allowed-registries)",
		image, strings.Join(l.AllowedRegistries, ", "))
}

// HighWater is the disk high-water mark of a job that asks for want.
func (l PullLimits) HighWater(want int32) int32 {
	if l.MaxHighWaterPercent > 0 && want > l.MaxHighWaterPercent {
		return l.MaxHighWaterPercent
	}
	return want
}

// ParseRegistries reads a comma-separated list of registries or registry
// and repository prefixes (--allowed-registries).
func ParseRegistries(list string) ([]string, error) {
	var out []string
	for _, r := range strings.Split(list, ",") {
		r = strings.TrimSuffix(strings.TrimSpace(r), "/")
		if r == "" {
			continue
		}
		if _, err := images.Normalize(r + "/x:1"); err != nil {
			return nil, fmt.Errorf("%q is not a registry or a registry and repository prefix: %w", r, err)
		}
		out = append(out, r)
	}
	return out, nil
}
