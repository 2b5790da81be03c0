package get

import (
	"fmt"
	"io"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/sandbox-fleet/sandbox-fleet/internal/cli/output"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/inventory"
)

// Formats are the values of -o for list verbs.
var Formats = []string{"table", "wide", "json", "yaml", "name"}

// PrintOptions say how a list is printed.
type PrintOptions struct {
	// Format is one of Formats.
	Format string
	// AllNamespaces adds a NAMESPACE column to tables.
	AllNamespaces bool
	NoHeaders     bool
}

// Print writes list — whose items carry their API version and kind — as
// opts.Format says: table through kubectl's table printer, the rest
// through its JSON, YAML and name printers, without managed fields as
// kubectl get does.
func Print(w io.Writer, list runtime.Object, table *metav1.Table, opts PrintOptions) error {
	var p printers.ResourcePrinter
	switch opts.Format {
	case "table", "wide":
		p = printers.NewTablePrinter(printers.PrintOptions{
			Wide: opts.Format == "wide", WithNamespace: opts.AllNamespaces, NoHeaders: opts.NoHeaders,
		})
		return p.PrintObj(table, w)
	case "json":
		p = &printers.JSONPrinter{}
	case "yaml":
		p = &printers.YAMLPrinter{}
	case "name":
		// The name printer takes unstructured lists only.
		return apimeta.EachListItem(list, func(item runtime.Object) error {
			return (&printers.NamePrinter{}).PrintObj(item, w)
		})
	default:
		return output.Validate(opts.Format, Formats...)
	}
	return (&printers.OmitManagedFieldsPrinter{Delegate: p}).PrintObj(list, w)
}

func ratio(ready, total int) string { return fmt.Sprintf("%d/%d", ready, total) }

func row(obj runtime.Object, cells ...any) metav1.TableRow {
	return metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: obj}}
}

// RunsTable is the table of runs: one row per run with its pools, its
// claims and Pods (ready of all) and age; wide adds the warm depth, images
// and nodes.
func RunsTable(runs *inventory.RunList, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Run", Type: "string", Format: "name", Description: "the run id, on every object of the run as sandbox-fleet.io/run-id"},
		{Name: "Pools", Type: "integer", Description: "warm pools"},
		{Name: "Claims", Type: "string", Description: "claims whose sandbox is Ready, of all claims"},
		{Name: "Pods", Type: "string", Description: "Ready Pods, of all the run's Pods"},
		{Name: "Age", Type: "string"},
		{Name: "Warm", Type: "integer", Priority: 1, Description: "sandboxes the pools are asked to keep"},
		{Name: "Images", Type: "string", Priority: 1},
		{Name: "Nodes", Type: "string", Priority: 1},
	}}
	for i := range runs.Items {
		r := &runs.Items[i]
		s := r.Status
		t.Rows = append(t.Rows, row(r, r.Name, s.Pools, ratio(s.ReadyClaims, s.Claims), ratio(s.ReadyPods, s.Pods),
			output.Age(r.CreationTimestamp, now), s.WarmReplicas, output.OrNone(strings.Join(s.Images, ",")), output.OrNone(strings.Join(s.Nodes, ","))))
	}
	return t
}

// PoolsTable is the table of warm pools, grouped by run: ready sandboxes of
// the depth asked, image and age; wide adds the template, the Pods and the
// nodes they are on.
func PoolsTable(inv *inventory.Inventory, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Run", Type: "string"},
		{Name: "Name", Type: "string", Format: "name"},
		{Name: "Ready", Type: "string", Description: "Ready warm sandboxes, of the depth asked"},
		{Name: "Image", Type: "string"},
		{Name: "Age", Type: "string"},
		{Name: "Template", Type: "string", Priority: 1},
		{Name: "Pods", Type: "integer", Priority: 1, Description: "the pool's Pods, warm and claimed"},
		{Name: "Nodes", Type: "string", Priority: 1},
	}}
	for i := range inv.Pools {
		p := &inv.Pools[i]
		pods := inv.PodsOf(p)
		t.Rows = append(t.Rows, row(p, inventory.RunOf(p), p.Name, ratio(int(p.Status.ReadyReplicas), inventory.Depth(p)), inv.ImageOf(p),
			output.Age(p.CreationTimestamp, now), p.Spec.TemplateRef.Name, len(pods), output.OrNone(inventory.Nodes(pods))))
	}
	return t
}

// ClaimsTable is the table of claims, grouped by run: the task each
// serves, how its sandbox stands (Ready, Pending or the trouble keeping it
// from Ready), its node and age; wide adds the sandbox, Pod, Pod IP and
// pool.
func ClaimsTable(inv *inventory.Inventory, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Run", Type: "string"},
		{Name: "Name", Type: "string", Format: "name"},
		{Name: "Task", Type: "string"},
		{Name: "Status", Type: "string", Description: "Ready, Pending, or what keeps the sandbox from Ready"},
		{Name: "Node", Type: "string"},
		{Name: "Age", Type: "string"},
		{Name: "Sandbox", Type: "string", Priority: 1},
		{Name: "Pod", Type: "string", Priority: 1},
		{Name: "IP", Type: "string", Priority: 1},
		{Name: "Pool", Type: "string", Priority: 1},
	}}
	for i := range inv.Claims {
		c := &inv.Claims[i]
		node, podName, ip := "<none>", "<none>", "<none>"
		if pod := inv.PodOf(c); pod != nil {
			podName = pod.Name
			node = output.OrNone(pod.Spec.NodeName)
			ip = output.OrNone(pod.Status.PodIP)
		}
		t.Rows = append(t.Rows, row(c, inventory.RunOf(c), c.Name, output.OrNone(inventory.TaskOf(c)), inv.Status(c), node,
			output.Age(c.CreationTimestamp, now), output.OrNone(c.Status.SandboxStatus.Name), podName, ip, c.Spec.WarmPoolRef.Name))
	}
	return t
}
