package testcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// Ports are drawn at random below Linux's ephemeral range (32768 and up), so
// an outgoing connection of some other process cannot take a port between
// the moment it is chosen and the moment its component binds it; the bind
// test and the record of ports handed out rule out the rest.
const (
	minPort = 10000
	maxPort = 32767
)

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		p := minPort + rand.IntN(maxPort-minPort)
		if portsUsed[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		portsUsed[p] = true
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
