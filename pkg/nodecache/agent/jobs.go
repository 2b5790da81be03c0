package agent

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// reportInterval is how often a node's progress on a job is written
// while it changes: a node pulling 100 small images writes a few times,
// not 100. Every write goes to every agent watching the job, so this
// bounds the job's watch traffic too.
const reportInterval = 2 * time.Second

// jobs runs the PrepullJobs that select the agent's node, one goroutine
// per job, and removes a deleted job's images when it says to.
type jobs struct {
	a  *Agent
	wg sync.WaitGroup

	mu   sync.Mutex
	runs map[types.UID]*jobRun
}

// jobRun is a job on this node, running or finished, until it is deleted.
type jobRun struct {
	job    *v1alpha1.PrepullJob
	cancel context.CancelFunc
	done   chan struct{}
	// pulled are the images pulled for the job; read once done is closed.
	pulled []string
}

// runJobs follows PrepullJobs until ctx ends, and waits for their runs.
func (a *Agent) runJobs(ctx context.Context) {
	j := &jobs{a: a, runs: map[types.UID]*jobRun{}}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: a.Client.jobs(),
		ObjectType:    &v1alpha1.PrepullJob{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { j.start(ctx, obj.(*v1alpha1.PrepullJob)) },
			UpdateFunc: func(_, obj any) { j.start(ctx, obj.(*v1alpha1.PrepullJob)) },
			DeleteFunc: func(obj any) {
				if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = gone.Obj
				}
				if job, ok := obj.(*v1alpha1.PrepullJob); ok {
					j.stop(ctx, job)
				}
			},
		},
	})
	informer.RunWithContext(ctx)
	j.wg.Wait()
}

// start runs job on this node unless it runs already or the node's entry
// says it is done (an agent restarted after finishing it).
func (j *jobs) start(ctx context.Context, job *v1alpha1.PrepullJob) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.runs[job.UID]; ok || job.DeletionTimestamp != nil {
		return
	}
	for _, n := range job.Status.Nodes {
		if n.Node == j.a.Node && nodecache.Final(n) {
			return
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	run := &jobRun{job: job, cancel: cancel, done: make(chan struct{})}
	j.runs[job.UID] = run
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		defer close(run.done)
		j.a.prepull(runCtx, run)
	}()
}

// stop ends a deleted job's run and, if it asks, removes the images it
// pulled that no other job on the node wants and no container uses.
func (j *jobs) stop(ctx context.Context, job *v1alpha1.PrepullJob) {
	j.mu.Lock()
	run, ok := j.runs[job.UID]
	delete(j.runs, job.UID)
	wanted := map[string]bool{}
	for _, other := range j.runs {
		for _, img := range other.job.Spec.Images {
			wanted[img] = true
		}
	}
	j.mu.Unlock()
	if !ok {
		return
	}
	run.cancel()
	if !job.Spec.DeleteWhenDone {
		return
	}
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		<-run.done
		j.a.removeImages(ctx, job, run.pulled, wanted)
	}()
}

// prepull pulls a job's images on this node, reporting its progress.
func (a *Agent) prepull(ctx context.Context, run *jobRun) {
	job := run.job
	log := a.Log.WithValues("prepulljob", job.Namespace+"/"+job.Name)
	node, err := a.Client.node(ctx, a.Node)
	for backoff := retryBackoff(); err != nil; node, err = a.Client.node(ctx, a.Node) {
		log.Error(err, "Reading the agent's Node for the job's node selector")
		if !sleep(ctx, backoff.Step()) {
			return
		}
	}
	if !labels.SelectorFromSet(job.Spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return
	}
	log.Info("Pulling", "images", len(job.Spec.Images))
	p := nodecache.NewNodeProgress(job.Spec.Images)
	parallelism := max(int(job.Spec.PerNodeParallelism), 1)
	work := make(chan string)
	results := make(chan pullResult)
	for range parallelism {
		go func() {
			for img := range work {
				results <- a.pullOne(ctx, img, job.Spec.DiskHighWaterPercent)
			}
		}()
	}
	defer close(work)

	report := func() {
		if err := a.Client.applyNodeStatus(ctx, job, p.Status(a.Node, time.Now())); err != nil && ctx.Err() == nil {
			log.Error(err, "Writing the node's progress")
		}
	}
	report()
	ticker := time.NewTicker(reportInterval)
	defer ticker.Stop()
	queue, inFlight, dirty := p.Images(), 0, false
	for len(queue) > 0 && !p.Stopped() || inFlight > 0 {
		var send chan string
		var next string
		if len(queue) > 0 && !p.Stopped() {
			send, next = work, queue[0]
		}
		select {
		case <-ctx.Done():
			// The job was deleted: nothing to report to; the workers see
			// ctx too and their results are not waited for.
			go func() {
				for range inFlight {
					<-results
				}
			}()
			return
		case send <- next:
			queue, inFlight = queue[1:], inFlight+1
		case r := <-results:
			inFlight--
			dirty = true
			switch {
			case r.stop != "":
				p.Stop(r.stop)
			case r.err != "":
				p.Fail(r.image, r.err)
			case r.present:
				p.Present(r.image)
			default:
				p.Pulled(r.image)
				run.pulled = append(run.pulled, r.image)
			}
			if r.note != "" {
				p.Note(r.note)
			}
		case <-ticker.C:
			if dirty {
				report()
				dirty = false
			}
		}
	}
	report()
	s := p.Status(a.Node, time.Now())
	log.Info("Done", "phase", s.Phase, "pulled", s.Pulled, "present", s.Present, "failed", s.Failed, "pending", s.Pending)
}

// pullResult is what became of one image.
type pullResult struct {
	image   string
	present bool
	// err says why the pull failed, stop why it was not started.
	err, stop string
	// note is said about the node while nothing is wrong.
	note string
}

// pullOne pulls img unless the node has it or its image filesystem is
// past the high-water mark.
func (a *Agent) pullOne(ctx context.Context, img string, highWaterPercent int32) pullResult {
	r := pullResult{image: img}
	id, err := a.Runtime.ImageID(ctx, img)
	if err != nil {
		r.err = err.Error()
		return r
	}
	if id != "" {
		r.present = true
		return r
	}
	fs, err := a.Runtime.Filesystem(ctx)
	if err != nil {
		r.err = "reading the image filesystem before pulling: " + err.Error()
		return r
	}
	over, msg := nodecache.OverBudget(fs, highWaterPercent)
	if over {
		r.stop = msg
		return r
	}
	r.note = msg
	if err := a.Runtime.Pull(ctx, img); err != nil {
		r.err = err.Error()
	}
	return r
}

// removeImages removes a deleted job's pulled images from the node,
// but not those another job wants or a container uses.
func (a *Agent) removeImages(ctx context.Context, job *v1alpha1.PrepullJob, pulled []string, wanted map[string]bool) {
	log := a.Log.WithValues("prepulljob", job.Namespace+"/"+job.Name)
	inUse, err := a.Runtime.ImagesInUse(ctx)
	if err != nil {
		log.Error(err, "Not removing the job's images: the runtime's containers cannot be listed")
		return
	}
	for _, img := range pulled {
		if wanted[img] {
			continue
		}
		id, err := a.Runtime.ImageID(ctx, img)
		if err != nil || id == "" || inUse[id] {
			continue
		}
		if err := a.Runtime.Remove(ctx, img); err != nil {
			log.Error(err, "Removing a pulled image")
			continue
		}
		log.Info("Removed", "image", img)
	}
}
