package testimages

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"
)

// epoch is every file's modification time, so that a layer's bytes, and so
// its digest, depend on its content alone.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// layerWriter writes a deterministic tar stream: root-owned entries with a
// fixed time, in the order they are added.
type layerWriter struct{ tw *tar.Writer }

func (w layerWriter) dir(name string, mode int64) error {
	return w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: epoch})
}

func (w layerWriter) file(name string, mode int64, content []byte) error {
	if err := w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(content)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := w.tw.Write(content)
	return err
}

func (w layerWriter) symlink(name, target string) error {
	return w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: epoch})
}

// tree adds the directory src under the name prefix, in lexical order.
func (w layerWriter) tree(src, prefix string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(prefix, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := int64(info.Mode().Perm())
		switch {
		case d.IsDir():
			return w.dir(name, mode)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return w.symlink(name, target)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return w.file(name, mode, b)
		default:
			return fmt.Errorf("%s: unsupported file type %s", p, d.Type())
		}
	})
}

// cachedLayer returns the gzipped layer file for key in dir, writing it with
// write first if it is not there. The file appears only when complete.
func cachedLayer(dir, key string, write func(io.Writer) error) (string, error) {
	final := filepath.Join(dir, key+".tar.gz")
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".layer-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	zw, err := gzip.NewWriterLevel(tmp, gzip.BestSpeed)
	if err != nil {
		return "", err
	}
	if err := write(zw); err != nil {
		tmp.Close()
		return "", fmt.Errorf("building layer %s: %w", key, err)
	}
	if err := zw.Close(); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return final, os.Rename(tmp.Name(), final)
}

// tarLayer is a write function for cachedLayer that builds a tar stream.
func tarLayer(build func(layerWriter) error) func(io.Writer) error {
	return func(w io.Writer) error {
		tw := tar.NewWriter(w)
		if err := build(layerWriter{tw}); err != nil {
			return err
		}
		return tw.Close()
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
