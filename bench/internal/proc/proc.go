// Package proc reads what the benchmarks measure of a process from /proc.
package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU is the CPU time a process has used, user and system: fields 14 and
// 15 of /proc/PID/stat, in the kernel's USER_HZ ticks (100 a second on
// every Linux).
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	fs := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err1 := strconv.ParseInt(fs[11], 10, 64)
	stime, err2 := strconv.ParseInt(fs[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

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
