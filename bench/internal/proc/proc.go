// Package proc reads what the benchmarks measure of a process from /proc.
package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Memory is a process's resident set size now and at its peak, and how
// much of it now is files mapped (its binary's pages).
func Memory(pid int) (rss, peak, file int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		key, value, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		switch key {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			peak = kb << 10
		case "RssFile":
			file = kb << 10
		}
	}
	return rss, peak, file, nil
}

// MiB formats bytes in MiB.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
