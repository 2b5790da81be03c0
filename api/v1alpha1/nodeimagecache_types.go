package v1alpha1

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeImageCache is what one node's container runtime holds: its images,
// each as a list of layers, and its image filesystem. The node's
// asrl-prepull-agent keeps it current and is the only writer; placement
// and the scheduler read it to put a sandbox where most of its image's
// bytes already are. Its name is the node's, and the Node owns it, so it
// goes when the Node goes.
//
// Images share most of their layers (SWE-bench images differ only in
// their top layers), so the layers are listed once, in a table, and each
// image names its layers by index. A layer is written as the first 16 hex
// digits of its compressed digest and its compressed size: enough to tell
// a node's layers apart and to match them against a registry's manifests,
// at a third of the bytes, which keeps a node with 5,000 images under
// 1 MiB. A node with more than the object can hold lists its largest
// images and says so in the Complete condition.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=nic;nics,categories=sandbox-fleet
// +kubebuilder:printcolumn:name="Images",type=integer,JSONPath=`.imageCount`
// +kubebuilder:printcolumn:name="Layers",type=integer,JSONPath=`.layerCount`
// +kubebuilder:printcolumn:name="Used",type=integer,JSONPath=`.imageFilesystem.usedBytes`,priority=1
// +kubebuilder:printcolumn:name="Capacity",type=integer,JSONPath=`.imageFilesystem.capacityBytes`,priority=1
// +kubebuilder:printcolumn:name="Observed",type=date,JSONPath=`.observedTime`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.agentVersion`,priority=1
type NodeImageCache struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// ObservedTime is when the agent last read the runtime.
	// +optional
	ObservedTime metav1.Time `json:"observedTime,omitempty"`
	// AgentVersion is the version of the agent that wrote this.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`
	// ImageFilesystem is the runtime's image filesystem.
	// +optional
	ImageFilesystem ImageFilesystem `json:"imageFilesystem,omitempty"`
	// ImageCount and LayerCount are the numbers of images and layers on
	// the node, which are those listed unless Complete is False.
	// +optional
	ImageCount int32 `json:"imageCount,omitempty"`
	// +optional
	LayerCount int32 `json:"layerCount,omitempty"`
	// Layers is the table of the listed images' layers.
	// +optional
	// +listType=atomic
	Layers []Layer `json:"layers,omitempty"`
	// Images are the images on the node.
	// +optional
	// +listType=atomic
	Images []CachedImage `json:"images,omitempty"`
	// Pulls are the layers the runtime is fetching, as the agent last saw
	// them: every few seconds while the node pulls, and cleared when it
	// stops. A reader matches them to an image's layers to say how far
	// its pull is. Their sum is also in the annotation PullingAnnotation,
	// for readers that watch only the objects' metadata.
	// +optional
	// +listType=atomic
	Pulls []LayerPull `json:"pulls,omitempty"`
	// Conditions: Complete (every image on the node is listed, with its
	// layers) and RuntimeReachable (the last read of the runtime worked).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ImageFilesystem is the filesystem a runtime keeps images on.
type ImageFilesystem struct {
	// UsedBytes is what the images take on it.
	// +optional
	UsedBytes int64 `json:"usedBytes,omitempty"`
	// CapacityBytes and AvailableBytes are the filesystem's size and free
	// space, when the agent can see the filesystem.
	// +optional
	CapacityBytes int64 `json:"capacityBytes,omitempty"`
	// +optional
	AvailableBytes int64 `json:"availableBytes,omitempty"`
}

// CachedImage is one image on a node.
type CachedImage struct {
	// Names are the image's tags on the node, repository:tag; an image
	// pulled only by digest has its repository@digest references instead.
	// They are written short, as docker prints them (busybox:1.36 for
	// docker.io/library/busybox:1.36).
	// +optional
	// +listType=atomic
	Names []string `json:"names,omitempty"`
	// Digest is the first 16 hex digits of the image's manifest digest,
	// which references by digest match.
	// +optional
	Digest string `json:"digest,omitempty"`
	// Layers are the image's layers, base first, as indices into the
	// NodeImageCache's layer table.
	// +optional
	// +listType=atomic
	Layers []int32 `json:"layers,omitempty"`
}

// PullingAnnotation sums, on a NodeImageCache, the pulls its node is
// fetching, as JSON: {"done":BYTES,"size":BYTES,"bytesPerSecond":RATE},
// the bytes fetched and the size of the layers in Pulls, and the rate of
// those still fetching. It is set and cleared with Pulls. A run watches
// only the caches' metadata (a few hundred bytes an object, where the
// objects are up to 1 MiB) to count the bytes its sandboxes wait for.
const PullingAnnotation = "sandbox-fleet.io/pulling"

// LayerPull is a layer being fetched: its compressed digest, cut to 16 hex
// digits as in the layer table, the bytes fetched of its size, and the
// rate they came at since the fetch began.
type LayerPull struct {
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{16}$`
	Digest string `json:"digest"`
	Done   int64  `json:"done"`
	Size   int64  `json:"size"`
	// +optional
	BytesPerSecond int64 `json:"bytesPerSecond,omitempty"`
}

// Layer is a layer of the node's images: its compressed digest, cut to
// its first 16 hex digits, and its compressed size in bytes. It is
// written as one string, "DIGEST:SIZE", which keeps the layer table
// small.
//
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:Pattern=`^[0-9a-f]{16}:[0-9]+$`
type Layer struct {
	Digest string
	Size   int64
}

// LayerDigestLength is how many hex digits of a layer's or manifest's
// sha256 digest NodeImageCaches keep.
const LayerDigestLength = 16

func (l Layer) String() string { return l.Digest + ":" + strconv.FormatInt(l.Size, 10) }

// ParseLayer parses the "DIGEST:SIZE" form of a Layer.
func ParseLayer(s string) (Layer, error) {
	digest, size, ok := strings.Cut(s, ":")
	n, err := strconv.ParseInt(size, 10, 64)
	if !ok || err != nil || n < 0 || len(digest) != LayerDigestLength {
		return Layer{}, fmt.Errorf("layer %q: want %d hex digits of its digest, a colon and its size in bytes", s, LayerDigestLength)
	}
	return Layer{Digest: digest, Size: n}, nil
}

// MarshalJSON writes the layer as "DIGEST:SIZE".
func (l Layer) MarshalJSON() ([]byte, error) { return json.Marshal(l.String()) }

// UnmarshalJSON reads the layer from "DIGEST:SIZE".
func (l *Layer) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	parsed, err := ParseLayer(s)
	if err != nil {
		return err
	}
	*l = parsed
	return nil
}

// NodeImageCache condition types and reasons.
const (
	// ConditionComplete is True when every image on the node is listed
	// with its layers.
	ConditionComplete   = "Complete"
	ReasonAllListed     = "AllListed"
	ReasonTooManyImages = "TooManyImages"
	// ReasonPartialData: the runtime listed its images, but some of
	// their layers or its image filesystem could not be read.
	ReasonPartialData = "PartialData"
	// ConditionRuntimeReachable is False when the agent cannot list the
	// runtime's images; the object then shows what the last read found.
	ConditionRuntimeReachable = "RuntimeReachable"
	ReasonReachable           = "Reachable"
	ReasonUnreachable         = "Unreachable"
)

// +kubebuilder:object:root=true

// NodeImageCacheList is a list of NodeImageCaches.
type NodeImageCacheList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeImageCache `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NodeImageCache{}, &NodeImageCacheList{})
}
