package agent

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// pulledRecord keeps, in a directory on the node, the images the agent
// pulled for each job that removes them when deleted (one file per job
// UID, an image a line), so an agent that restarts — or is down when the
// job is deleted — still removes them. With no directory it keeps
// nothing, and a restarted agent removes nothing.
type pulledRecord struct {
	dir string
}

// add records that image was pulled for job uid.
func (r pulledRecord) add(uid types.UID, image string) error {
	if r.dir == "" {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(r.dir, string(uid)), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(image + "\n")
	return errors.Join(err, f.Close())
}

// images are the images recorded for job uid.
func (r pulledRecord) images(uid types.UID) ([]string, error) {
	if r.dir == "" {
		return nil, nil
	}
	f, err := os.Open(filepath.Join(r.dir, string(uid)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var images []string
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		if img := strings.TrimSpace(lines.Text()); img != "" {
			images = append(images, img)
		}
	}
	return images, lines.Err()
}

// forget drops the record of job uid.
func (r pulledRecord) forget(uid types.UID) error {
	if r.dir == "" {
		return nil
	}
	err := os.Remove(filepath.Join(r.dir, string(uid)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// jobs are the UIDs of the jobs with a record.
func (r pulledRecord) jobs() ([]types.UID, error) {
	if r.dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, err
	}
	var uids []types.UID
	for _, e := range entries {
		if e.Type().IsRegular() {
			uids = append(uids, types.UID(e.Name()))
		}
	}
	return uids, nil
}
