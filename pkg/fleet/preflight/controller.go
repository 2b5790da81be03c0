package preflight

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/heartbeat"
)

// The Agent Sandbox controller as its release manifests install it, and
// the leader-election Lease its replicas renew.
const (
	ControllerNamespace = "agent-sandbox-system"
	ControllerName      = "agent-sandbox-controller"
	ControllerLease     = "a3317529.agent-sandbox.x-k8s.io"
)

// checkController says whether the Agent Sandbox controller runs —
// without it no claim ever becomes Ready, and a run would wait out
// readyTimeout — and which version it is.
func checkController(ctx context.Context, kc kubernetes.Interface) []Check {
	lease, err := kc.CoordinationV1().Leases(ControllerNamespace).Get(ctx, ControllerLease, metav1.GetOptions{})
	if err != nil {
		lease = nil
	}
	dep := controllerDeployment(ctx, kc)
	return []Check{judgeController(lease, dep, time.Now()), checkControllerVersion(controllerVersion(dep, servedVersions(kc)))}
}

// controllerDeployment is the controller's Deployment as its release
// installs it, nil when absent or not readable.
func controllerDeployment(ctx context.Context, kc kubernetes.Interface) *appsv1.Deployment {
	dep, err := kc.AppsV1().Deployments(ControllerNamespace).Get(ctx, ControllerName, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return dep
}

// judgeController judges what could be read of the controller (nil: not
// found, or not allowed): a leader Lease renewed within its duration is a
// leading replica; a Deployment with no ready replica, or a Lease gone stale
// with no ready replica in sight, is a controller that is down; nothing
// readable is a warning.
func judgeController(lease *coordinationv1.Lease, dep *appsv1.Deployment, now time.Time) Check {
	const name = "agent-sandbox-controller"
	fix := fmt.Sprintf("claims become Ready only while it runs: check `kubectl -n %s get pods` and its logs", ControllerNamespace)
	install := "install it with its extensions (https://agent-sandbox.sigs.k8s.io/docs/getting_started/), or, if it runs elsewhere, ignore this"
	fresh := lease != nil && !heartbeat.Expired(lease, now)
	switch {
	case fresh:
		holder := "a replica"
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		return Check{Name: name, Status: Pass, Detail: fmt.Sprintf("leader %s renews its Lease %s/%s", holder, ControllerNamespace, ControllerLease)}
	case dep != nil && dep.Status.ReadyReplicas == 0:
		return Check{Name: name, Status: Fail, Detail: fmt.Sprintf("Deployment %s/%s has no ready replica", ControllerNamespace, ControllerName), Fix: fix}
	case dep != nil && lease != nil:
		return Check{Name: name, Status: Warn, Detail: fmt.Sprintf("Deployment %s/%s has %d ready replicas, but its leader Lease was last renewed %s ago: no replica may be leading",
			ControllerNamespace, ControllerName, dep.Status.ReadyReplicas, since(lease, now)), Fix: fix}
	case dep != nil:
		return Check{Name: name, Status: Pass, Detail: fmt.Sprintf("Deployment %s/%s has %d ready replicas", ControllerNamespace, ControllerName, dep.Status.ReadyReplicas)}
	case lease != nil:
		return Check{Name: name, Status: Fail, Detail: fmt.Sprintf("its leader Lease %s/%s was last renewed %s ago: the controller is not running", ControllerNamespace, ControllerLease, since(lease, now)), Fix: fix}
	default:
		return Check{Name: name, Status: Warn, Detail: fmt.Sprintf("found neither its Deployment %s/%s nor its leader Lease (or may not read them), so it may not be running", ControllerNamespace, ControllerName), Fix: install}
	}
}

func since(lease *coordinationv1.Lease, now time.Time) string {
	renewed := lease.Spec.RenewTime
	if renewed == nil {
		renewed = lease.Spec.AcquireTime
	}
	if renewed == nil {
		return "never"
	}
	return now.Sub(renewed.Time).Round(time.Second).String()
}
