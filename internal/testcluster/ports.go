package testcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// Ports are drawn at random below Linux's ephemeral range (32768 and up), so
// an outgoing connection of some other process cannot take a port between
// the moment it is chosen and the moment its component binds it, and below
// the node port range, which the network plugin opens to every Pod.
const (
	minPort = 10000
	maxPort = nodePortMin - 1
)

var (
	portsMu sync.Mutex
	// portLocks are held for the life of the process: `go test` runs
	// packages in parallel, and a port one test binary has chosen but whose
	// component has not bound it yet must not be chosen by another.
	// The kernel drops the locks when the process exits, however it exits.
	portLocks = map[int]*os.File{}
)

func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	lockDir := filepath.Join(os.TempDir(), "sandbox-fleet-ports")
	if err := os.MkdirAll(lockDir, 0o777); err != nil {
		return 0, err
	}
	for range 200 {
		p := minPort + rand.IntN(maxPort-minPort)
		if portLocks[p] != nil {
			continue
		}
		lock, err := os.OpenFile(filepath.Join(lockDir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return 0, err
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			lock.Close() // another test process holds it
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			lock.Close()
			continue
		}
		l.Close()
		portLocks[p] = lock
		return p, nil
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1 between %d and %d", minPort, maxPort)
}

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// FreePorts reserves n free ports on 127.0.0.1 for servers a test starts
// itself, such as a webhook, the same way the cluster's components get
// theirs: no other test binary is handed them.
func FreePorts(n int) ([]int, error) { return freePorts(n) }
