// Package informer reads a cluster's NodeImageCaches into a
// nodecache.Index: kept current by an informer, for the readers that score
// nodes on every Pod (the scheduler plugin, the webhook's node-cache
// affinity), or read once, a page at a time (the fleet's placement, the
// cache verb). (The node agent, which only writes its own object, does
// not link it.)
package informer

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// Caches is the index of every node's cache, kept by an informer.
type Caches struct {
	mu     sync.RWMutex
	index  *nodecache.Index
	synced cache.InformerSynced
}

// Start follows the cluster's NodeImageCaches through c until ctx ends.
func Start(ctx context.Context, c client.WithWatch) *Caches {
	caches := &Caches{index: nodecache.NewIndex()}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: listWatch(c),
		ObjectType:    &v1alpha1.NodeImageCache{},
		Transform:     toIndexed(klog.FromContext(ctx)),
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    caches.set,
			UpdateFunc: func(_, obj any) { caches.set(obj) },
			DeleteFunc: caches.delete,
		},
	})
	go informer.RunWithContext(ctx)
	caches.synced = informer.HasSynced
	return caches
}

// WaitForSync waits until the caches were listed, and reports whether
// they were before ctx ended.
func (c *Caches) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), c.synced)
}

// Synced reports whether the caches were listed.
func (c *Caches) Synced() bool { return c.synced() }

// Read calls f with the index, which must not be kept or changed.
func (c *Caches) Read(f func(*nodecache.Index)) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	f(c.index)
}

// indexed is what the informer keeps of a NodeImageCache: its metadata
// and the node's index, not the object, which for a node with thousands
// of images is a MiB.
type indexed struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// node is nil for an object that cannot be used.
	node *nodecache.Node
}

// DeepCopyObject shares the node: it is never changed once built.
func (c *indexed) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// toIndexed turns a listed or watched NodeImageCache into what the
// informer keeps, logging to log one it cannot read.
func toIndexed(log klog.Logger) func(obj any) (any, error) {
	return func(obj any) (any, error) {
		c, ok := obj.(*v1alpha1.NodeImageCache)
		if !ok {
			// A deletion's last state, turned already.
			return obj, nil
		}
		out := &indexed{ObjectMeta: metav1.ObjectMeta{Name: c.Name, UID: c.UID, ResourceVersion: c.ResourceVersion}}
		node, err := nodecache.NewNode(c)
		if err != nil {
			log.Error(err, "Ignoring a NodeImageCache", "nodeimagecache", c.Name)
			return out, nil
		}
		out.node = node
		return out, nil
	}
}

func (c *Caches) set(obj any) {
	x := obj.(*indexed)
	c.mu.Lock()
	defer c.mu.Unlock()
	if x.node == nil {
		c.index.Delete(x.Name)
		return
	}
	c.index.Set(x.node)
}

func (c *Caches) delete(obj any) {
	if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = gone.Obj
	}
	x, ok := obj.(*indexed)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.index.Delete(x.Name)
}

// EachCache calls fn with every NodeImageCache, reading them a page at a
// time: each can be a MiB.
func EachCache(ctx context.Context, c client.Client, fn func(*v1alpha1.NodeImageCache) error) error {
	const page = 50
	list := &v1alpha1.NodeImageCacheList{}
	for {
		if err := c.List(ctx, list, client.Limit(page), client.Continue(list.Continue)); err != nil {
			return fmt.Errorf("listing NodeImageCaches: %w", err)
		}
		for i := range list.Items {
			if err := fn(&list.Items[i]); err != nil {
				return err
			}
		}
		if list.Continue == "" {
			return nil
		}
	}
}

// Snapshot reads the caches of nodes into an index, once. Caches an agent
// did not write as it should are left out.
func Snapshot(ctx context.Context, c client.Client, nodes []string) (*nodecache.Index, error) {
	index := nodecache.NewIndex()
	wanted := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		wanted[n] = true
	}
	err := EachCache(ctx, c, func(nic *v1alpha1.NodeImageCache) error {
		if !wanted[nic.Name] {
			return nil
		}
		if n, err := nodecache.NewNode(nic); err == nil {
			index.Set(n)
		}
		return nil
	})
	return index, err
}

// listWatch lists and watches NodeImageCaches.
func listWatch(c client.WithWatch) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &v1alpha1.NodeImageCacheList{}
			err := c.List(ctx, list, &client.ListOptions{Raw: &opts})
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, &v1alpha1.NodeImageCacheList{}, &client.ListOptions{Raw: &opts})
		},
	}
}
