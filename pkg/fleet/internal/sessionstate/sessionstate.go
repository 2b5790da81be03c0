// Package sessionstate keeps, in the cluster, what a fleet session (package
// session) needs to be resumed by another process when its own dies:
// what the Kubernetes objects cannot say. That is the session's
// configuration and options, the tasks added to it (id and image; their
// metadata stays with the trainer), and its clients — each one's key
// digest and lease expiry, and which is the owner. Pools and held
// sandboxes are read back from the run's objects themselves (their
// labels, and the client and request annotations on each claim), never
// from here, so the two cannot disagree.
//
// It is a few ConfigMaps labelled with the run id: sandbox-fleet-RUN-session
// for the configuration and clients, and sandbox-fleet-RUN-tasks-N for the
// tasks, taskChunk to each, gzipped. Close deletes them with the run.
package sessionstate

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

// ErrNone is a run with no session state: never served, or closed.
var ErrNone = errors.New("no session state")

// Part is the label naming which part of a session's state a ConfigMap
// holds: "session" or "tasks".
const Part = "sandbox-fleet.io/session-state"

// taskChunk is how many tasks one ConfigMap holds: ids and image names
// gzip to a few tens of bytes a task, far below a ConfigMap's 1 MiB.
const taskChunk = 10000

// Client is what a session knows of one client.
type Client struct {
	// KeySHA256 is the hex SHA-256 of the key the client's first call
	// bound its id to.
	KeySHA256 string    `json:"keySHA256"`
	Expires   time.Time `json:"expires"`
}

// Options are the session's options, as serve was given them.
type Options struct {
	LeaseTTL  metav1.Duration `json:"leaseTTL"`
	WarmTTL   metav1.Duration `json:"warmTTL"`
	Heartbeat metav1.Duration `json:"heartbeat"`
}

// Clients are a session's clients and its owner.
type Clients struct {
	Owner   string            `json:"owner,omitempty"`
	Clients map[string]Client `json:"clients,omitempty"`
}

// State is a session's whole state.
type State struct {
	Config  config.Fleet
	Options Options
	Clients Clients
	Tasks   []tasks.Task
}

// Store reads and writes one run's session state in one namespace. Its
// writes are not safe to call concurrently; the session serializes them.
type Store struct {
	Client           client.Client
	Namespace, RunID string
}

func (s *Store) name(part string) string { return "sandbox-fleet-" + s.RunID + "-" + part }

// configMap is the ConfigMap of the part of kind ("session" or "tasks")
// named part.
func (s *Store) configMap(kind, part string) *corev1.ConfigMap {
	l := labels.ForRun(s.RunID)
	l[Part] = kind
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.name(part), Namespace: s.Namespace, Labels: l}}
}

// Create records a new session: its configuration, options and first
// tasks. A session of the run recorded already is an error that says to
// resume it.
func (s *Store) Create(ctx context.Context, cfg config.Fleet, opts Options, ts []tasks.Task) error {
	cm := s.configMap("session", "session")
	var err error
	if cm.Data, err = sessionData(cfg, opts, Clients{}); err != nil {
		return err
	}
	if err := s.Client.Create(ctx, cm); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("run %s has a session already (ConfigMap %s/%s): resume it with serve --resume %s, or choose another --run-id",
				s.RunID, s.Namespace, cm.Name, s.RunID)
		}
		return fmt.Errorf("recording the session in ConfigMap %s/%s: %w", s.Namespace, cm.Name, err)
	}
	return s.SaveTasks(ctx, ts, 0)
}

func sessionData(cfg config.Fleet, opts Options, cs Clients) (map[string]string, error) {
	data := map[string]string{}
	for key, v := range map[string]any{"config.json": cfg, "options.json": opts, "clients.json": cs} {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encoding the session's %s: %w", key, err)
		}
		data[key] = string(b)
	}
	return data, nil
}

// SaveClients records the session's clients.
func (s *Store) SaveClients(ctx context.Context, cs Clients) error {
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: s.Namespace, Name: s.name("session")}
	if err := s.Client.Get(ctx, key, cm); err != nil {
		return fmt.Errorf("reading ConfigMap %s: %w", key, err)
	}
	b, err := json.Marshal(cs)
	if err != nil {
		return err
	}
	cm.Data["clients.json"] = string(b)
	if err := s.Client.Update(ctx, cm); err != nil {
		return fmt.Errorf("recording the session's clients in ConfigMap %s: %w", key, err)
	}
	return nil
}

// SaveTasks records all, the session's tasks in the order they were added,
// of which the first from are recorded already: the chunks from's falls in
// and those after it are written.
func (s *Store) SaveTasks(ctx context.Context, all []tasks.Task, from int) error {
	for first := from / taskChunk * taskChunk; first < len(all); first += taskChunk {
		chunk := all[first:min(first+taskChunk, len(all))]
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		enc := json.NewEncoder(zw)
		for _, t := range chunk {
			if err := enc.Encode(tasks.Task{ID: t.ID, Image: t.Image, OriginalImage: t.OriginalImage}); err != nil {
				return err
			}
		}
		if err := zw.Close(); err != nil {
			return err
		}
		cm := s.configMap("tasks", "tasks-"+strconv.Itoa(first/taskChunk))
		cm.BinaryData = map[string][]byte{"tasks.jsonl.gz": buf.Bytes()}
		err := s.Client.Create(ctx, cm)
		if apierrors.IsAlreadyExists(err) {
			have := &corev1.ConfigMap{}
			if err = s.Client.Get(ctx, client.ObjectKeyFromObject(cm), have); err == nil {
				have.BinaryData = cm.BinaryData
				err = s.Client.Update(ctx, have)
			}
		}
		if err != nil {
			return fmt.Errorf("recording the session's tasks in ConfigMap %s/%s: %w", s.Namespace, cm.Name, err)
		}
	}
	return nil
}

// Load reads the session's state; ErrNone when the run has none.
func (s *Store) Load(ctx context.Context) (State, error) {
	var st State
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: s.Namespace, Name: s.name("session")}
	if err := s.Client.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return st, fmt.Errorf("run %s in namespace %s: %w (no ConfigMap %s): it was never served, or was closed or reaped",
				s.RunID, s.Namespace, ErrNone, key.Name)
		}
		return st, fmt.Errorf("reading ConfigMap %s: %w", key, err)
	}
	for key, v := range map[string]any{"config.json": &st.Config, "options.json": &st.Options, "clients.json": &st.Clients} {
		if err := json.Unmarshal([]byte(cm.Data[key]), v); err != nil {
			return st, fmt.Errorf("ConfigMap %s/%s: %s: %w", s.Namespace, cm.Name, key, err)
		}
	}
	for i := 0; ; i++ {
		chunk := &corev1.ConfigMap{}
		err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.name("tasks-" + strconv.Itoa(i))}, chunk)
		if apierrors.IsNotFound(err) {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("reading the session's tasks: %w", err)
		}
		ts, err := readTasks(chunk.BinaryData["tasks.jsonl.gz"])
		if err != nil {
			return st, fmt.Errorf("ConfigMap %s/%s: %w", s.Namespace, chunk.Name, err)
		}
		st.Tasks = append(st.Tasks, ts...)
	}
}

func readTasks(b []byte) ([]tasks.Task, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	var out []tasks.Task
	dec := json.NewDecoder(zr)
	for {
		var t tasks.Task
		if err := dec.Decode(&t); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
}

// Delete deletes the session's state: the run has ended. A caller who
// may not list ConfigMaps has none to delete.
func (s *Store) Delete(ctx context.Context) error {
	list := &corev1.ConfigMapList{}
	err := s.Client.List(ctx, list, client.InNamespace(s.Namespace),
		client.MatchingLabels{labels.RunID: s.RunID, labels.ManagedBy: labels.ManagedByValue}, client.HasLabels{Part})
	if apierrors.IsForbidden(err) {
		// A user who may not list ConfigMaps cannot have served a
		// session here: there is nothing of one to delete.
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing the session state of run %s: %w", s.RunID, err)
	}
	for i := range list.Items {
		if err := client.IgnoreNotFound(s.Client.Delete(ctx, &list.Items[i])); err != nil {
			return fmt.Errorf("deleting the session state of run %s: %w", s.RunID, err)
		}
	}
	return nil
}
