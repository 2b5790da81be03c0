// Package testlog collects what a test's processes and components log,
// for the test to read while they still write.
package testlog

import (
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

// Buffer is a log written from many goroutines and read at any time.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Klog copies what this process logs through klog, each line once, to a
// Buffer and to stderr until t ends. The INFO stream carries every
// severity; the others, which repeat it, are discarded rather than written
// to files.
func Klog(t testing.TB) *Buffer {
	var b Buffer
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	klog.SetOutputBySeverity("INFO", io.MultiWriter(&b, os.Stderr))
	t.Cleanup(func() {
		klog.LogToStderr(true)
		klog.SetOutput(os.Stderr)
	})
	return &b
}
