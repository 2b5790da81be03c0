// Package heartbeat keeps a driver's liveness in the cluster: a
// coordination.k8s.io Lease in the run's namespace, named after and
// labelled with its run id, renewed while the driver (`run` or `serve`)
// lives. A run whose Lease has expired lost its driver: `reap --orphans`
// removes it. A run that is merely old is never an orphan while its driver
// renews.
package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// DefaultDuration is how long a Lease stays valid unrenewed; it is renewed
// every third of it.
const DefaultDuration = 30 * time.Second

// Name is the Lease of run runID.
func Name(runID string) string { return "sandbox-fleet-" + runID }

// Heartbeat renews one run's Lease until Stop.
type Heartbeat struct {
	kube      kubernetes.Interface
	namespace string
	name      string
	stop      context.CancelFunc
	done      chan struct{}
}

// Check refuses a heartbeat duration a Lease cannot hold: under a second
// (a Lease counts whole seconds).
func Check(duration time.Duration) error {
	if duration < time.Second {
		return fmt.Errorf("%s: must be at least 1s (a Lease's duration is whole seconds)", duration)
	}
	return nil
}

// Start creates the run's Lease, held by holder, and renews it every third
// of duration until Stop. A Lease left by an earlier driver of the same run
// (a resumed run) is taken over. duration must pass Check.
func Start(ctx context.Context, kube kubernetes.Interface, namespace, runID, holder string, duration time.Duration) (*Heartbeat, error) {
	if err := Check(duration); err != nil {
		return nil, fmt.Errorf("heartbeat of run %s: %w", runID, err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: Name(runID), Namespace: namespace, Labels: labels.ForRun(runID)},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: ptr.To(int32(duration / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	leases := kube.CoordinationV1().Leases(namespace)
	_, err := leases.Create(ctx, lease, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var old *coordinationv1.Lease
		if old, err = leases.Get(ctx, lease.Name, metav1.GetOptions{}); err == nil {
			lease.ResourceVersion = old.ResourceVersion
			_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("creating the run's heartbeat Lease %s/%s: %w", namespace, lease.Name, err)
	}
	renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	h := &Heartbeat{kube: kube, namespace: namespace, name: lease.Name, stop: stop, done: make(chan struct{})}
	go h.renew(renewCtx, duration/3)
	return h, nil
}

func (h *Heartbeat) renew(ctx context.Context, every time.Duration) {
	defer close(h.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		leases := h.kube.CoordinationV1().Leases(h.namespace)
		lease, err := leases.Get(ctx, h.name, metav1.GetOptions{})
		if err == nil {
			lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
		if err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Renewing the run's heartbeat Lease failed", "lease", klog.KRef(h.namespace, h.name))
		}
	}
}

// Stop stops renewing and deletes the Lease: the run has ended.
func (h *Heartbeat) Stop(ctx context.Context) error {
	h.stop()
	<-h.done
	err := h.kube.CoordinationV1().Leases(h.namespace).Delete(ctx, h.name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the run's heartbeat Lease %s/%s: %w", h.namespace, h.name, err)
	}
	return nil
}

// Let stops renewing and lets the run go, for another driver to take it
// over at once (WaitAbandoned): the Lease stays, held by no one, and
// expires unless one does.
func (h *Heartbeat) Let(ctx context.Context) error {
	h.stop()
	<-h.done
	leases := h.kube.CoordinationV1().Leases(h.namespace)
	lease, err := leases.Get(ctx, h.name, metav1.GetOptions{})
	if err == nil {
		lease.Spec.HolderIdentity = nil
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("letting go of the run's heartbeat Lease %s/%s: %w", h.namespace, h.name, err)
	}
	return nil
}

// Expired reports whether lease went unrenewed for longer than its
// duration at now; a Lease never renewed nor acquired has.
func Expired(lease *coordinationv1.Lease, now time.Time) bool {
	expires, ok := ExpiresAt(lease)
	return !ok || now.After(expires)
}

// ExpiresAt is when lease runs out unless it is renewed: its last renewal
// (or acquisition) plus its duration. ok is false for a Lease never
// renewed nor acquired, or without a duration.
func ExpiresAt(lease *coordinationv1.Lease) (expires time.Time, ok bool) {
	renewed := lease.Spec.RenewTime
	if renewed == nil {
		renewed = lease.Spec.AcquireTime
	}
	if renewed == nil || lease.Spec.LeaseDurationSeconds == nil {
		return time.Time{}, false
	}
	return renewed.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second), true
}

// WaitAbandoned returns once run runID's driver is gone, for another to
// take the run over: its Lease is gone, expired or let go (Let), or its
// holder is a process of this host that no longer exists. Until then it
// says, through ctx's logger, whom it waits for, and waits at most until
// the Lease would expire unrenewed before it looks again.
func WaitAbandoned(ctx context.Context, kube kubernetes.Interface, namespace, runID string) error {
	host, _ := os.Hostname()
	said := false
	for {
		lease, err := kube.CoordinationV1().Leases(namespace).Get(ctx, Name(runID), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the run's heartbeat Lease %s/%s: %w", namespace, Name(runID), err)
		}
		now := time.Now()
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		if holder == "" || Expired(lease, now) || deadHere(holder, host) {
			return nil
		}
		if !said {
			klog.FromContext(ctx).Info("The run is still driven by another (its heartbeat Lease is renewed): waiting for it to stop, or its Lease to expire",
				"run", runID, "driver", holder, "lease", klog.KObj(lease))
			said = true
		}
		renewed := ptr.Deref(lease.Spec.RenewTime, ptr.Deref(lease.Spec.AcquireTime, metav1.NewMicroTime(now)))
		until := renewed.Add(time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 1))*time.Second + 100*time.Millisecond)
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to let run %s go: %w", holder, runID, context.Cause(ctx))
		case <-time.After(max(time.Until(until), 100*time.Millisecond)):
		}
	}
}

// deadHere reports whether holder (driver@host/pid, as the fleet's Start
// names it) is a process of host that no longer exists.
func deadHere(holder, host string) bool {
	at := strings.LastIndex(holder, "@")
	slash := strings.LastIndex(holder, "/")
	if at < 0 || slash < at || holder[at+1:slash] != host {
		return false
	}
	pid, err := strconv.Atoi(holder[slash+1:])
	if err != nil || pid <= 0 {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
