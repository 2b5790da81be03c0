// Package cache implements `kubectl sandbox-fleet cache`: what the nodes'
// runtimes hold, from the NodeImageCaches their asrl-prepull-agents
// publish, and how much of each image of a task file every node has.
package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/inputs"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/usage"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/informer"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/registry"
)

type options struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	imagesFile  string
	tasks       inputs.TaskFlags
	output      string
	registry    bool
}

// NewCommand returns the cache verb.
func NewCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, streams: streams}
	cmd := &cobra.Command{
		Use:   "cache [--images FILE] [-o json|yaml]",
		Short: "Show the images the nodes hold, or how much of each image every node has",
		Long: `Cache reads the NodeImageCaches that asrl-prepull-agent publishes for each node.

Without --images it lists the nodes: how many images and layers each holds,
its image filesystem, and whether its agent reads the runtime. With --images
(a task file: JSONL rows or a list of images; - reads stdin) it shows, for
each image, how many of its bytes every node already has: images share most
of their layers, so a node without an image may still hold nearly all of it.
An image's layers are learnt from a node that has it; for an image no node
has, from its registry (with the docker config's credentials), unless
--registry=false, which lists it as unknown.`,
		Example: `  # the nodes and what they hold
  kubectl sandbox-fleet cache

  # how much of each task's image every node has, as JSON
  kubectl sandbox-fleet cache --images swe-bench-lite.jsonl -o json`,
		Args: usage.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(o.output, output.Human, output.JSON, output.YAML); err != nil {
				return err
			}
			var images []string
			if o.imagesFile != "" {
				loaded, err := o.tasks.Load([]string{o.imagesFile}, o.streams.In, nil)
				if err != nil {
					return err
				}
				for _, t := range loaded {
					if !slices.Contains(images, t.Image) {
						images = append(images, t.Image)
					}
				}
			}
			clients, err := kube.FromFlags(o.configFlags, kube.Limits{})
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), clients.Client, images)
		},
	}
	cmd.Flags().StringVar(&o.imagesFile, "images", "", "task file whose images to look up: JSONL rows or a list of images; - reads stdin")
	o.tasks.AddFlags(cmd.Flags())
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: json or yaml (default: a table)")
	cmd.Flags().BoolVar(&o.registry, "registry", true, "read the layers of images no node has from their registries")
	return cmd
}

func (o *options) run(ctx context.Context, c client.Client, images []string) error {
	var summaries []NodeSummary
	index := nodecache.NewIndex()
	err := informer.EachCache(ctx, c, func(nic *v1alpha1.NodeImageCache) error {
		summaries = append(summaries, summarize(nic))
		if len(images) == 0 {
			return nil
		}
		n, err := nodecache.NewNode(nic)
		if err != nil {
			return err
		}
		index.Set(n)
		return nil
	})
	if err != nil {
		return err
	}
	if len(summaries) == 0 {
		return errors.New("no node publishes a NodeImageCache: is asrl-prepull-agent running? (kubectl apply -k manifests/prepull-agent)")
	}
	if len(images) == 0 {
		if o.output != output.Human {
			return output.Machine(o.streams.Out, o.output, summaries)
		}
		return printNodes(o.streams.Out, summaries, time.Now())
	}
	presences := nodecache.Presences(index, images, o.fromRegistries(ctx, index, images))
	if o.output != output.Human {
		return output.Machine(o.streams.Out, o.output, presences)
	}
	return printPresences(o.streams.Out, presences)
}

// fromRegistries reads the layers of the images no node has from their
// registries. An image that cannot be read is warned about, and shown as
// unknown.
func (o *options) fromRegistries(ctx context.Context, index *nodecache.Index, images []string) map[string][]v1alpha1.Layer {
	if !o.registry {
		return nil
	}
	var unlisted []string
	for _, img := range images {
		if _, onANode := index.Layers(img); !onANode {
			unlisted = append(unlisted, img)
		}
	}
	r := (&registry.Layers{}).GetAll(ctx, unlisted, 30*time.Second)
	for _, err := range r.Failed {
		fmt.Fprintf(o.streams.ErrOut, "Warning: %v\n", err)
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(o.streams.ErrOut, "Warning: %d images were not read, their registry having let a read time out: %s\n",
			len(r.Skipped), strings.Join(r.Skipped, ", "))
	}
	return r.Found
}

// NodeSummary is what one node holds.
type NodeSummary struct {
	Node            string                   `json:"node"`
	Images          int32                    `json:"images"`
	Layers          int32                    `json:"layers"`
	ImageFilesystem v1alpha1.ImageFilesystem `json:"imageFilesystem"`
	ObservedTime    metav1.Time              `json:"observedTime"`
	// Problem says what is wrong with the node's cache, if anything:
	// its runtime unreachable, a partial read, too many images to list.
	Problem string `json:"problem,omitempty"`
}

func summarize(nic *v1alpha1.NodeImageCache) NodeSummary {
	s := NodeSummary{Node: nic.Name, Images: nic.ImageCount, Layers: nic.LayerCount,
		ImageFilesystem: nic.ImageFilesystem, ObservedTime: nic.ObservedTime}
	for _, typ := range []string{v1alpha1.ConditionRuntimeReachable, v1alpha1.ConditionComplete} {
		if c := meta.FindStatusCondition(nic.Conditions, typ); c != nil && c.Status != metav1.ConditionTrue && s.Problem == "" {
			s.Problem = c.Reason + ": " + c.Message
		}
	}
	return s
}

func printNodes(w io.Writer, nodes []NodeSummary, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tIMAGES\tLAYERS\tIMAGE FS\tOBSERVED\tSTATUS")
	for _, n := range nodes {
		fs := output.Bytes(n.ImageFilesystem.UsedBytes)
		if n.ImageFilesystem.CapacityBytes > 0 {
			fs += " of " + output.Bytes(n.ImageFilesystem.CapacityBytes)
		}
		observed := "<never>"
		if !n.ObservedTime.IsZero() {
			observed = duration.HumanDuration(now.Sub(n.ObservedTime.Time)) + " ago"
		}
		status := n.Problem
		if status == "" {
			status = "ok"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", n.Node, n.Images, n.Layers, fs, observed, status)
	}
	return tw.Flush()
}

func printPresences(w io.Writer, presences []nodecache.Presence) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tSIZE\tNODE\tPRESENT\tMISSING")
	unknown := 0
	for _, p := range presences {
		size := output.Bytes(p.SizeBytes)
		if !p.Known {
			size, unknown = "unknown", unknown+1
		}
		image := p.Image
		for _, n := range p.Nodes {
			present := output.Bytes(n.PresentBytes)
			if p.SizeBytes > 0 {
				present += fmt.Sprintf(" (%d%%)", n.PresentBytes*100/p.SizeBytes)
			}
			missing := output.Bytes(n.MissingBytes)
			if !p.Known {
				present, missing = "-", "all"
			}
			if !n.Complete {
				missing += " or less"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", image, size, n.Node, present, missing)
			image, size = "", ""
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case unknown == 1:
		fmt.Fprintln(w, "\n1 image is on no node and was not read from its registry: its size is unknown.")
	case unknown > 1:
		fmt.Fprintf(w, "\n%d images are on no node and were not read from their registries: their sizes are unknown.\n", unknown)
	}
	return nil
}
