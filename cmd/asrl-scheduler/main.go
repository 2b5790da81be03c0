// Command asrl-scheduler is kube-scheduler with the NodeCacheLocality
// plugin compiled in (pkg/scheduler/nodecachelocality): every flag and the
// KubeSchedulerConfiguration are kube-scheduler's; a profile enables the
// plugin by name. See manifests/scheduler.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/scheduler/nodecachelocality"
)

func main() {
	// The plugin reads NodeImageCaches through controller-runtime.
	ctrllog.SetLogger(klog.NewKlogr())
	os.Exit(cli.Run(app.NewSchedulerCommand(app.WithPlugin(nodecachelocality.Name, nodecachelocality.New))))
}
