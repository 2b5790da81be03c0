package claim

import (
	"context"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/sandbox"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// Claimer claims sandboxes of one run in one namespace.
type Claimer struct {
	Client  client.Client
	Tracker *tracker.Tracker
	// Grace is how long trouble that may clear up is borne.
	Grace Grace
}

// Acquire claims a sandbox of pool for task and waits until it is Ready.
// When the claimed Pod cannot start — at once for terminal trouble, after
// Grace for the rest — or ctx ends, the claim is deleted and an error
// returned; a *verdict.StartError says why the Pod failed, a *verdict.VanishedError that
// someone else deleted the claim. annotations go on the claim. bound, when
// set, is called once the claim names its sandbox, Ready or not: from then
// on no sandbox of the pool can be the claim's. Callers bound ctx.
func (c *Claimer) Acquire(ctx context.Context, pool *extensionsv1beta1.SandboxWarmPool, taskID string, annotations map[string]string, bound func()) (*sandbox.Handle, error) {
	claim := resources.Claim(pool, taskID, annotations)
	asked := time.Now()
	if err := c.create(ctx, pool, claim); err != nil {
		return nil, c.abandon(claim, fmt.Errorf("task %s: creating a claim on pool %s: %w", taskID, pool.Name, err))
	}
	patience := Patience{Grace: c.Grace}
	seen := false
	for {
		changed := c.Tracker.ClaimChanged(claim.Name)
		st, found, err := c.Tracker.Claim(ctx, claim.Name)
		if err != nil {
			return nil, c.abandon(claim, err)
		}
		if seen && (!found || st.Claim.DeletionTimestamp != nil) {
			return nil, &verdict.VanishedError{TaskID: taskID, Claim: claim.Name}
		}
		seen = seen || found
		var timer <-chan time.Time
		if found {
			if bound != nil && st.Claim.Status.SandboxStatus.Name != "" {
				bound()
				bound = nil
			}
			if st.Ready() {
				h := HandleOf(st)
				h.Warm = c.warmHit(st.Pod.Name, asked)
				return h, nil
			}
			trouble := Classify(st.Pod)
			giveUp, recheck := patience.Judge(trouble, time.Now())
			if giveUp {
				return nil, c.abandon(claim, &verdict.StartError{TaskID: taskID, Claim: claim.Name, Pod: st.Pod.Name, Reason: trouble.Reason, Message: trouble.Message, Terminal: trouble.Terminal})
			}
			if recheck > 0 {
				// No event may come while a Pod backs off; wake up when
				// the grace runs out.
				timer = time.After(recheck)
			}
		}
		select {
		case <-ctx.Done():
			return nil, c.abandon(claim, fmt.Errorf("task %s: waiting for claim %s: %w", taskID, claim.Name, context.Cause(ctx)))
		case <-changed:
		case <-timer:
		}
	}
}

// HandleOf is the handle of a Ready claim.
func HandleOf(st tracker.ClaimState) *sandbox.Handle {
	name := st.Claim.Status.SandboxStatus.Name
	return &sandbox.Handle{TaskID: st.Claim.Annotations[labels.TaskID], Namespace: st.Claim.Namespace, Claim: st.Claim.Name,
		Sandbox: name, Hostname: name, Pod: st.Pod.Name, PodUID: st.Pod.UID, Restarts: restarts(st.Pod),
		PodIP: st.Claim.Status.SandboxStatus.PodIPs[0], Node: st.Pod.Spec.NodeName}
}

// warmHit reports whether Pod pod was Ready, as the run's watch saw it,
// before the claim was asked for at asked: the claim found a warm sandbox
// and did not wait for one to start.
func (c *Claimer) warmHit(pod string, asked time.Time) bool {
	since, ok := c.Tracker.ReadySince(pod)
	return ok && since.Before(asked)
}

// create creates claim, trying again while the API server cannot be
// reached or asks to be asked later, until ctx ends. The claim's name is
// fixed before the first try, so when a try landed but its answer was lost
// (a dropped connection), the next meets AlreadyExists and finds the claim
// of this task under that name: it is the one made. A name another claim
// holds gets a new one.
func (c *Claimer) create(ctx context.Context, pool *extensionsv1beta1.SandboxWarmPool, claim *extensionsv1beta1.SandboxClaim) error {
	delay := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 5 * time.Second}
	tried := false
	for {
		err := c.Client.Create(ctx, claim.DeepCopy())
		switch {
		case err == nil:
			return nil
		case apierrors.IsAlreadyExists(err) && tried:
			have := &extensionsv1beta1.SandboxClaim{}
			gerr := c.Client.Get(ctx, client.ObjectKeyFromObject(claim), have)
			switch {
			case gerr == nil && have.Annotations[labels.TaskID] == claim.Annotations[labels.TaskID] &&
				have.Labels[labels.RunID] == claim.Labels[labels.RunID]:
				return nil
			case gerr == nil || apierrors.IsNotFound(gerr):
				claim.Name = resources.ClaimName(pool)
			case !kube.Transient(gerr):
				return gerr
			}
		case apierrors.IsAlreadyExists(err):
			claim.Name = resources.ClaimName(pool)
		case !kube.Transient(err):
			return err
		default:
			tried = true
			klog.FromContext(ctx).V(2).Info("Creating a claim failed; trying again", "claim", claim.Name, "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (the last try: %v)", context.Cause(ctx), err)
		case <-time.After(delay.Step()):
		}
	}
}

// abandon deletes a claim that will not be used and returns err.
func (c *Claimer) abandon(claim *extensionsv1beta1.SandboxClaim, err error) error {
	// The caller's context may be what ended; deletion must still happen.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if derr := client.IgnoreNotFound(c.Client.Delete(ctx, claim)); derr != nil {
		return fmt.Errorf("%w (and deleting claim %s failed: %v)", err, claim.Name, derr)
	}
	return err
}

// Alive returns nil while the handle's Pod — the one claimed, not a new
// Pod of the same name — exists, is not being deleted and has not
// finished, and a *verdict.LostError otherwise. It reads the tracker's
// cache, so it costs no API request.
func (c *Claimer) Alive(ctx context.Context, h *sandbox.Handle) error {
	pod, found, err := c.Tracker.Pod(ctx, h.Pod)
	switch {
	case err != nil:
		return err
	case !found:
		return &verdict.LostError{TaskID: h.TaskID, Pod: h.Pod, Why: "it no longer exists"}
	case pod.DeletionTimestamp != nil:
		return &verdict.LostError{TaskID: h.TaskID, Pod: h.Pod, Why: "it is being deleted"}
	case h.PodUID != "" && pod.UID != h.PodUID:
		return &verdict.LostError{TaskID: h.TaskID, Pod: h.Pod, Why: "it was deleted and replaced by a new Pod of the same name"}
	}
	if trouble := Classify(pod); trouble != nil && trouble.Terminal {
		return &verdict.LostError{TaskID: h.TaskID, Pod: h.Pod, Why: trouble.Reason + ": " + trouble.Message}
	}
	if restarts(pod) > h.Restarts {
		return &verdict.LostError{TaskID: h.TaskID, Pod: h.Pod, Why: "a container of it was killed and restarted, losing what the task did in it"}
	}
	return nil
}

// restarts sums the restarts of pod's containers.
func restarts(pod *corev1.Pod) int32 {
	var n int32
	for _, cs := range pod.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

// releaseTimeout bounds a release, so that a stalled API server cannot hold
// a task for ever; the run's teardown removes what a failed release left.
const releaseTimeout = time.Minute

// Release deletes the handle's claim, and with it the sandbox.
func (c *Claimer) Release(ctx context.Context, h *sandbox.Handle) error {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	claim := &extensionsv1beta1.SandboxClaim{}
	claim.Name, claim.Namespace = h.Claim, h.Namespace
	if err := client.IgnoreNotFound(c.Client.Delete(ctx, claim)); err != nil {
		return fmt.Errorf("task %s: releasing claim %s: %w", h.TaskID, h.Claim, err)
	}
	return nil
}
