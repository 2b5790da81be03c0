package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
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
// per job, removes a deleted job's images when it says to, and deletes
// finished jobs whose TTL has passed.
type jobs struct {
	a      *Agent
	store  cache.Store
	pulled pulledRecord
	wg     sync.WaitGroup

	mu   sync.Mutex
	runs map[types.UID]*jobRun
	// expiries delete jobs when their TTL after finishing has passed.
	expiries map[types.UID]*time.Timer
	// closed is set when the jobs stop: no expiry starts a deletion then.
	closed bool
}

// jobRun is a job on this node, running or finished, until it is deleted.
type jobRun struct {
	job    *v1alpha1.PrepullJob
	cancel context.CancelFunc
	done   chan struct{}
	// pulled are the images pulled for the job; read once done is closed.
	pulled []string
}

// pulledDir is where, under the agent's StateDir, it records the images
// it pulled for jobs that remove them.
const pulledDir = "pulled"

// runJobs follows PrepullJobs until ctx ends, and waits for their runs.
func (a *Agent) runJobs(ctx context.Context) {
	j := &jobs{a: a, runs: map[types.UID]*jobRun{}, expiries: map[types.UID]*time.Timer{}}
	if a.StateDir != "" {
		dir := filepath.Join(a.StateDir, pulledDir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			a.Log.Error(err, "Not recording pulled images: a restarted agent will not remove those of deleteWhenDone jobs")
		} else {
			j.pulled.dir = dir
		}
	}
	changed := func(obj any) {
		job := obj.(*v1alpha1.PrepullJob)
		j.start(ctx, job)
		j.expire(ctx, job)
	}
	var informer cache.Controller
	j.store, informer = cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: a.Client.jobs(),
		ObjectType:    &v1alpha1.PrepullJob{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    changed,
			UpdateFunc: func(_, obj any) { changed(obj) },
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
	informed := make(chan struct{})
	go func() {
		defer close(informed)
		informer.RunWithContext(ctx)
	}()
	if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		j.removeForgotten(ctx)
	}
	<-informed
	j.mu.Lock()
	j.closed = true
	for _, t := range j.expiries {
		t.Stop()
	}
	j.mu.Unlock()
	j.wg.Wait()
}

// expire (re)sets when this node deletes job: after its TTL, in the
// node's turn (nodecache.DeleteAt). An agent deletes it once every node
// is done, its own among them, so a node that takes its time does not
// lose the job.
func (j *jobs) expire(ctx context.Context, job *v1alpha1.PrepullJob) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if t, ok := j.expiries[job.UID]; ok {
		t.Stop()
		delete(j.expiries, job.UID)
	}
	at, ok := nodecache.DeleteAt(job, j.a.Node)
	if !ok || job.DeletionTimestamp != nil {
		return
	}
	j.armExpiry(ctx, job, time.Until(at))
}

// expiryRetry is how long an agent waits to delete an expired job again
// after the API refused.
const expiryRetry = 30 * time.Second

// armExpiry, with j.mu held, has job deleted in d if it is then still
// there, the same and expired, and tries again later if that fails.
func (j *jobs) armExpiry(ctx context.Context, job *v1alpha1.PrepullJob, d time.Duration) {
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		j.mu.Lock()
		// A newer timer (the job changed) or the agent's end wins.
		if j.closed || j.expiries[job.UID] != t {
			j.mu.Unlock()
			return
		}
		j.wg.Add(1)
		j.mu.Unlock()
		defer j.wg.Done()
		log := j.a.Log.WithValues("prepulljob", job.Namespace+"/"+job.Name)
		// The job as the informer has it now, for one that changed
		// since without its timer being reset yet.
		obj, exists, _ := j.store.Get(job)
		now, _ := obj.(*v1alpha1.PrepullJob)
		if !exists || now == nil || now.UID != job.UID {
			return
		}
		if at, ok := nodecache.DeleteAt(now, j.a.Node); !ok || time.Now().Before(at) {
			return
		}
		if err := j.a.Client.deleteJob(ctx, now); err != nil {
			log.Error(err, "Deleting a PrepullJob past its ttlSecondsAfterFinished; trying again", "in", expiryRetry)
			j.mu.Lock()
			if !j.closed && j.expiries[job.UID] == t {
				j.armExpiry(ctx, now, expiryRetry)
			}
			j.mu.Unlock()
			return
		}
		log.Info("Deleted a PrepullJob past its ttlSecondsAfterFinished")
	})
	j.expiries[job.UID] = t
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
		j.prepull(runCtx, run)
	}()
}

// stop ends a deleted job's run and, if it asks, removes the images it
// pulled that no other job wants and no container uses — those of this
// run, and those recorded before the agent restarted.
func (j *jobs) stop(ctx context.Context, job *v1alpha1.PrepullJob) {
	j.mu.Lock()
	run, ok := j.runs[job.UID]
	delete(j.runs, job.UID)
	if t, ok := j.expiries[job.UID]; ok {
		t.Stop()
		delete(j.expiries, job.UID)
	}
	j.mu.Unlock()
	if ok {
		run.cancel()
	}
	if !job.Spec.DeleteWhenDone {
		return
	}
	j.wg.Go(func() {
		var pulled []string
		if ok {
			<-run.done
			pulled = run.pulled
		}
		j.remove(ctx, job.UID, job.Namespace+"/"+job.Name, pulled)
	})
}

// removeForgotten removes the recorded images of jobs deleted while the
// agent was not running.
func (j *jobs) removeForgotten(ctx context.Context) {
	uids, err := j.pulled.jobs()
	if err != nil {
		j.a.Log.Error(err, "Reading the record of pulled images")
		return
	}
	for _, uid := range uids {
		if !slices.ContainsFunc(j.store.List(), func(obj any) bool { return obj.(*v1alpha1.PrepullJob).UID == uid }) {
			j.wg.Go(func() { j.remove(ctx, uid, "deleted while the agent was down, UID "+string(uid), nil) })
		}
	}
}

// remove removes the images pulled for job uid — pulled, and those
// recorded — that no other job wants, and forgets the record.
func (j *jobs) remove(ctx context.Context, uid types.UID, job string, pulled []string) {
	log := j.a.Log.WithValues("prepulljob", job)
	recorded, err := j.pulled.images(uid)
	if err != nil {
		log.Error(err, "Reading the record of the job's pulled images")
	}
	images := slices.Compact(slices.Sorted(slices.Values(append(pulled, recorded...))))
	if len(images) == 0 {
		return
	}
	wanted := map[string]bool{}
	for _, obj := range j.store.List() {
		if other := obj.(*v1alpha1.PrepullJob); other.UID != uid && other.DeletionTimestamp == nil {
			for _, img := range other.Spec.Images {
				wanted[img] = true
			}
		}
	}
	if !j.a.removeImages(ctx, log, images, wanted) || ctx.Err() != nil {
		// The record stays for the agent's next start.
		return
	}
	if err := j.pulled.forget(uid); err != nil {
		log.Error(err, "Forgetting the record of the job's pulled images")
	}
}

// prepull pulls a job's images on this node, reporting its progress.
func (j *jobs) prepull(ctx context.Context, run *jobRun) {
	a := j.a
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
	b := newBudget(a.Limits.HighWater(job.Spec.DiskHighWaterPercent), a.Runtime.Filesystem)
	for range parallelism {
		go func() {
			for img := range work {
				results <- a.pullOne(ctx, img, b)
			}
		}()
	}
	defer close(work)

	var reported time.Time
	report := func() {
		reported = time.Now()
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
				if job.Spec.DeleteWhenDone {
					if err := j.pulled.add(job.UID, r.image); err != nil {
						log.Error(err, "Recording a pulled image: a restarted agent would not remove it", "image", r.image)
					}
				}
			}
		case now := <-ticker.C:
			if reportDue(dirty, reported, now) {
				report()
				dirty = false
			}
		}
	}
	report()
	s := p.Status(a.Node, time.Now())
	log.Info("Done", "phase", s.Phase, "pulled", s.Pulled, "present", s.Present, "failed", s.Failed, "pending", s.Pending)
}

// reportDue says whether a node's progress on a job, last written at
// reported, is to be written at now: when it changed, and, as a heartbeat
// that tells a long pull from a stopped agent, when PrepullHeartbeat has
// passed since.
func reportDue(changed bool, reported, now time.Time) bool {
	return changed || now.Sub(reported) >= v1alpha1.PrepullHeartbeat
}

// pullResult is what became of one image.
type pullResult struct {
	image   string
	present bool
	// err says why the pull failed, stop why it was not started.
	err, stop string
}

// pullOne pulls img unless the agent's limits refuse it, the node has it
// or the job's budget b stops it.
func (a *Agent) pullOne(ctx context.Context, img string, b *budget) pullResult {
	r := pullResult{image: img}
	if refusal := a.Limits.Refusal(img); refusal != "" {
		r.err = refusal
		return r
	}
	id, err := a.Runtime.ImageID(ctx, img)
	if err != nil {
		r.err = err.Error()
		return r
	}
	if id != "" {
		r.present = true
		return r
	}
	release, stop, err := b.reserve(ctx)
	switch {
	case err != nil:
		// The budget cannot be checked: no pull of the job here can be.
		r.stop = "the disk budget cannot be checked: " + err.Error()
		return r
	case stop != "":
		r.stop = stop
		return r
	}
	var size int64
	defer func() { release(size) }()
	if err := a.Runtime.Pull(ctx, img); err != nil {
		r.err = err.Error()
		return r
	}
	if size, err = a.Runtime.ImageSize(ctx, img); err != nil {
		size = 0
	}
	return r
}

// removeImages removes a deleted job's pulled images from the node,
// but not those another job wants or a container uses. It reports false
// if it could not tell which are in use, and removed none.
func (a *Agent) removeImages(ctx context.Context, log logr.Logger, pulled []string, wanted map[string]bool) bool {
	inUse, err := a.Runtime.ImagesInUse(ctx)
	if err != nil {
		log.Error(err, "Not removing the job's images: the runtime's containers cannot be listed")
		return false
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
	return true
}
