package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/version"
)

// Client is the agent's API client: a REST client for NodeImageCaches,
// PrepullJobs and its Node's metadata. The agent runs on every node with a 30 MiB
// memory target, and its resident size grows with its binary: client-go's
// clientset or controller-runtime (pkg/kube, the other tools' client
// factory) would triple the code it maps and take it over the target on
// their own.
type Client struct {
	rest *rest.RESTClient
}

// NewClient builds the agent's client from cfg.
func NewClient(cfg *rest.Config) (*Client, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.APIPath = "/apis"
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = "asrl-prepull-agent/" + version.Get().GitVersion
	}
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the API client: %w", err)
	}
	return &Client{rest: rc}, nil
}

// node reads the metadata of Node name.
func (c *Client) node(ctx context.Context, name string) (*metav1.ObjectMeta, error) {
	raw, err := c.rest.Get().AbsPath("/api/v1/nodes", name).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var node metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &node); err != nil {
		return nil, fmt.Errorf("reading Node %s: %w", name, err)
	}
	return &node.ObjectMeta, nil
}

// jobs lists and watches PrepullJobs in every namespace.
func (c *Client) jobs() cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &v1alpha1.PrepullJobList{}
			err := c.rest.Get().Resource("prepulljobs").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(list)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			return c.rest.Get().Resource("prepulljobs").VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
		},
	}
}

// applyNodeStatus writes a node's entry in a PrepullJob's status. Each
// node's agent applies its own entry under a field manager of its own,
// so the agents of a thousand nodes write one job without conflicts.
func (c *Client) applyNodeStatus(ctx context.Context, job *v1alpha1.PrepullJob, entry v1alpha1.NodePrepullStatus) error {
	patch, err := json.Marshal(map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "PrepullJob",
		"metadata": map[string]string{"name": job.Name, "namespace": job.Namespace},
		"status":   map[string]any{"nodes": []v1alpha1.NodePrepullStatus{entry}},
	})
	if err != nil {
		return err
	}
	return c.rest.Patch(types.ApplyPatchType).Namespace(job.Namespace).Resource("prepulljobs").Name(job.Name).SubResource("status").
		Param("fieldManager", "asrl-prepull-agent-"+entry.Node).Param("force", "true").Body(patch).Do(ctx).Error()
}

// deleteJob deletes job, but not another job created since under its
// name; that it is gone already is no error.
func (c *Client) deleteJob(ctx context.Context, job *v1alpha1.PrepullJob) error {
	opts := metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(job.UID))}
	err := c.rest.Delete().Namespace(job.Namespace).Resource("prepulljobs").Name(job.Name).Body(&opts).Do(ctx).Error()
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// resourceVersion reads the resourceVersion of NodeImageCache name.
func (c *Client) resourceVersion(ctx context.Context, name string) (string, error) {
	resp, err := c.rest.Get().Resource("nodeimagecaches").Name(name).Stream(ctx)
	if err != nil {
		return "", err
	}
	return readResourceVersion(resp)
}

// create and update write cache and set its resourceVersion to the
// written one. The object is streamed, and of the response, as large as
// the object, only the metadata is read.
func (c *Client) create(ctx context.Context, cache *v1alpha1.NodeImageCache) error {
	return c.write(ctx, cache, c.rest.Post().Resource("nodeimagecaches"))
}

func (c *Client) update(ctx context.Context, cache *v1alpha1.NodeImageCache) error {
	return c.write(ctx, cache, c.rest.Put().Resource("nodeimagecaches").Name(cache.Name))
}

func (c *Client) write(ctx context.Context, cache *v1alpha1.NodeImageCache, req *rest.Request) error {
	cache.APIVersion, cache.Kind = v1alpha1.GroupVersion.String(), "NodeImageCache"
	body, w := io.Pipe()
	encoded := make(chan struct{})
	go func() {
		defer close(encoded)
		w.CloseWithError(nodecache.Encode(w, cache))
	}()
	resp, err := req.SetHeader("Content-Type", "application/json").Body(body).Stream(ctx)
	// The encoder reads cache, which the caller changes once this returns.
	// A server may answer (a conflict, an error) before reading the whole
	// body: closing body ends that encoding, and it must have ended before
	// cache is touched again.
	body.Close()
	<-encoded
	if err != nil {
		return err
	}
	cache.ResourceVersion, err = readResourceVersion(resp)
	return err
}

// patchConditions sets the conditions of cache's object, or creates it
// (with what cache holds) if there is none; the rest of the object stays
// as it was.
func (c *Client) patchConditions(ctx context.Context, cache *v1alpha1.NodeImageCache) error {
	patch, err := json.Marshal(map[string]any{"conditions": cache.Conditions, "agentVersion": cache.AgentVersion})
	if err != nil {
		return err
	}
	resp, err := c.rest.Patch(types.MergePatchType).Resource("nodeimagecaches").Name(cache.Name).Body(patch).Stream(ctx)
	if apierrors.IsNotFound(err) {
		return c.create(ctx, cache)
	}
	if err != nil {
		return err
	}
	cache.ResourceVersion, err = readResourceVersion(resp)
	return err
}

// patchPulls sets the pulls of cache's object and their sum in its
// annotation v1alpha1.PullingAnnotation, and those of cache once written.
// A missing object is left to the next full write.
func (c *Client) patchPulls(ctx context.Context, cache *v1alpha1.NodeImageCache, pulls []v1alpha1.LayerPull) error {
	// null removes the field and the annotation when nothing is pulling.
	var pulling *string
	if len(pulls) > 0 {
		sum, _ := nodecache.Fetching(pulls)
		pulling = new(sum.Annotation())
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]*string{v1alpha1.PullingAnnotation: pulling}},
		"pulls":    pulls,
	})
	if err != nil {
		return err
	}
	resp, err := c.rest.Patch(types.MergePatchType).Resource("nodeimagecaches").Name(cache.Name).Body(patch).Stream(ctx)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	cache.ResourceVersion, err = readResourceVersion(resp)
	if err != nil {
		return err
	}
	// The full writes carry both on.
	cache.Pulls = pulls
	if pulling == nil {
		delete(cache.Annotations, v1alpha1.PullingAnnotation)
	} else {
		metav1.SetMetaDataAnnotation(&cache.ObjectMeta, v1alpha1.PullingAnnotation, *pulling)
	}
	return nil
}

// readResourceVersion reads an object's resourceVersion from a response
// holding its JSON, without holding the rest of it, and closes the
// response having read it to the end, so the connection is used again.
func readResourceVersion(resp io.ReadCloser) (string, error) {
	defer resp.Close()
	rv, err := resourceVersionIn(resp)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(io.Discard, resp)
	return rv, err
}

func resourceVersionIn(r io.Reader) (string, error) {
	dec := json.NewDecoder(r)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", fmt.Errorf("reading a NodeImageCache: not a JSON object (%v)", err)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("reading a NodeImageCache: %w", err)
		}
		if key != "metadata" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", fmt.Errorf("reading a NodeImageCache: %w", err)
			}
			continue
		}
		var meta struct {
			ResourceVersion string `json:"resourceVersion"`
		}
		if err := dec.Decode(&meta); err != nil {
			return "", fmt.Errorf("reading a NodeImageCache's metadata: %w", err)
		}
		return meta.ResourceVersion, nil
	}
	return "", errors.New("reading a NodeImageCache: no metadata")
}
