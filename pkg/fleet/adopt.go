package fleet

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/claim"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
)

// Adopted is what Adopt found of the run a driver that died left.
type Adopted struct {
	// Images are those whose pools were found; they are the fleet's warm
	// pools again, as they are.
	Images []string
	// Sandboxes are the Ready claimed sandboxes, with their claims'
	// annotations, for the caller to give back to whom they were for or
	// to release.
	Sandboxes []*AdoptedSandbox
	// Dropped names the claims deleted because they were not Ready: their
	// acquire was under way when the driver died; its retry claims anew.
	Dropped []string
}

// AdoptedSandbox is a claimed sandbox found by Adopt.
type AdoptedSandbox struct {
	*Sandbox
	Image       string
	Annotations map[string]string
}

// Adopt takes over, on every cluster, the pools and claims of the run
// that an earlier driver of it left, as they are in the API server: pools
// keep their sandboxes (none is made anew), Ready claims are handed back,
// and claims not Ready are deleted. Call it once, after Open and before
// anything warms or claims.
func (f *Fleet) Adopt(ctx context.Context) (Adopted, error) {
	var out Adopted
	for _, c := range f.clusters {
		inv, err := inventory.List(ctx, c.Clients.Client, c.Namespace(), f.runID)
		if err != nil {
			return out, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		templates := map[string]*extensionsv1beta1.SandboxTemplate{}
		for i := range inv.Templates {
			templates[inv.Templates[i].Name] = &inv.Templates[i]
		}
		imageOf := map[string]string{}
		f.mu.Lock()
		for i := range inv.Pools {
			pool := &inv.Pools[i]
			tmpl := templates[pool.Spec.TemplateRef.Name]
			img := mainImage(tmpl)
			if pool.DeletionTimestamp != nil || img == "" || pool.Spec.Replicas == nil {
				continue
			}
			imageOf[pool.Name] = img
			p := &placed{cluster: c, pool: pool, template: tmpl, replicas: int(*pool.Spec.Replicas)}
			if f.paced() {
				p.held, p.gate = map[string]bool{}, make(chan struct{}, 1)
			}
			f.warm[img] = p
			c.replicas += p.replicas
			out.Images = append(out.Images, img)
		}
		f.mu.Unlock()
		for i := range inv.Claims {
			cl := &inv.Claims[i]
			img, ok := imageOf[cl.Spec.WarmPoolRef.Name]
			if cl.DeletionTimestamp != nil {
				continue
			}
			st, found, err := c.tracker.Claim(ctx, cl.Name)
			if err != nil {
				return out, fmt.Errorf("cluster %s: %w", c.Name, err)
			}
			if !ok || !found || !st.Ready() {
				if err := client.IgnoreNotFound(c.Clients.Client.Delete(ctx, cl)); err != nil {
					return out, fmt.Errorf("cluster %s: deleting claim %s, not Ready: %w", c.Name, cl.Name, err)
				}
				out.Dropped = append(out.Dropped, cl.Name)
				continue
			}
			h := claim.HandleOf(st)
			h.Cluster = c.Name
			f.mu.Lock()
			c.claims++
			if p := f.warm[img]; p.held != nil {
				p.held[h.Pod] = true
			}
			f.mu.Unlock()
			out.Sandboxes = append(out.Sandboxes, &AdoptedSandbox{
				Sandbox: &Sandbox{Handle: h, cluster: c, image: img, session: f.cfg.Session},
				Image:   img, Annotations: cl.Annotations})
		}
	}
	return out, nil
}

// mainImage is the image of a template's sandbox container.
func mainImage(t *extensionsv1beta1.SandboxTemplate) string {
	if t == nil {
		return ""
	}
	for _, c := range t.Spec.PodTemplate.Spec.Containers {
		if c.Name == resources.ContainerName {
			return c.Image
		}
	}
	return ""
}

// Annotate sets the annotations of the sandbox's claim: a nil value
// removes one. A session records there whom the sandbox is for.
func (s *Sandbox) Annotate(ctx context.Context, annotations map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	cl := &extensionsv1beta1.SandboxClaim{}
	cl.Name, cl.Namespace = s.Claim, s.Namespace
	if err := s.cluster.Clients.Client.Patch(ctx, cl, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("annotating claim %s: %w", s.Claim, err)
	}
	return nil
}
