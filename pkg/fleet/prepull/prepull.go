// Package prepull starts PrepullJobs and waits for them: the client side
// of pre-pulling, which the nodes' asrl-prepull-agents carry out.
package prepull

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// Targets are the nodes a node selector picks that run an agent (publish
// a NodeImageCache), and those it picks that do not: they will never
// pull, so a wait leaves them out.
func Targets(ctx context.Context, c client.Client, selector map[string]string) (withAgent, without []string, err error) {
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := c.List(ctx, nodes, client.MatchingLabels(selector)); err != nil {
		return nil, nil, fmt.Errorf("listing the nodes the selector picks: %w", err)
	}
	caches := &metav1.PartialObjectMetadataList{}
	caches.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("NodeImageCacheList"))
	if err := c.List(ctx, caches); err != nil {
		return nil, nil, fmt.Errorf("listing NodeImageCaches to find the nodes with an agent: %w", err)
	}
	agents := map[string]bool{}
	for _, nic := range caches.Items {
		agents[nic.Name] = true
	}
	for _, n := range nodes.Items {
		if agents[n.Name] {
			withAgent = append(withAgent, n.Name)
		} else {
			without = append(without, n.Name)
		}
	}
	slices.Sort(withAgent)
	slices.Sort(without)
	return withAgent, without, nil
}

// Wait polls job every interval until every target node is done, and
// calls onChange with its progress whenever that changes. It returns the
// final progress, or the last one with an error when ctx ends first.
func Wait(ctx context.Context, c client.Client, job *v1alpha1.PrepullJob, targets []string, interval time.Duration, onChange func(nodecache.JobProgress)) (nodecache.JobProgress, error) {
	var last nodecache.JobProgress
	first := true
	for {
		current := &v1alpha1.PrepullJob{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), current); err != nil {
			return last, fmt.Errorf("reading PrepullJob %s/%s: %w", job.Namespace, job.Name, err)
		}
		p := nodecache.Progress(current, targets)
		if first || counts(p) != counts(last) {
			onChange(p)
		}
		first, last = false, p
		if p.Finished() {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(interval):
		}
	}
}

func counts(p nodecache.JobProgress) [6]int32 {
	return [6]int32{p.Pulled, p.Present, p.Failed, p.Pending, int32(p.Done), int32(p.Succeeded)}
}

// OfRun lists the names of run runID's PrepullJobs in namespace, sorted.
// A cluster without the PrepullJob kind (no agent installed) has none,
// and so has a caller who may not list them: the shipped RBAC lets no
// namespace's user create or read PrepullJobs, so such a caller's run
// made none (its creates were refused), and its teardown and its check
// for leftovers must not fail for jobs it could not have.
func OfRun(ctx context.Context, c client.Client, namespace, runID string) ([]string, error) {
	jobs := &metav1.PartialObjectMetadataList{}
	jobs.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("PrepullJobList"))
	err := c.List(ctx, jobs, client.InNamespace(namespace), client.MatchingLabels(labels.ForRun(runID)))
	if apimeta.IsNoMatchError(err) || apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the PrepullJobs of run %s: %w", runID, err)
	}
	names := make([]string, len(jobs.Items))
	for i, j := range jobs.Items {
		names[i] = j.Name
	}
	slices.Sort(names)
	return names, nil
}

// DeleteOfRun deletes run runID's PrepullJobs in namespace, one by one
// (list and delete, no collection delete: the reaper may do no more),
// and returns their names. The images the nodes pulled stay, unless a
// job asked them removed (deleteWhenDone).
func DeleteOfRun(ctx context.Context, c client.Client, namespace, runID string) ([]string, error) {
	names, err := OfRun(ctx, c, namespace, runID)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		job := &v1alpha1.PrepullJob{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		if err := c.Delete(ctx, job); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("deleting PrepullJob %s of run %s: %w", name, runID, err)
		}
	}
	return names, nil
}
