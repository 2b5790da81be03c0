package exec

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// ownUsers reports whether the peer of c, a TCP connection accepted on
// loopback, is a socket of this process's user or of root: the kernel
// lists each socket's owner in /proc/net/tcp, the peer's under its own
// address (its local port our remote one, and the other way round).
func ownUsers(c net.Conn) bool {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return false
	}
	uid, err := socketOwner("/proc/net/tcp", remote.Port, local.Port)
	if err != nil {
		return false
	}
	return uid == os.Geteuid() || uid == 0
}

// socketOwner is the uid of the socket table's (at path) connection from
// port local to port remote.
func socketOwner(path string, local, remote int) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", local)
	to := fmt.Sprintf(":%04X", remote)
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
		if len(fields) < 8 || !strings.HasSuffix(fields[1], want) || !strings.HasSuffix(fields[2], to) {
			continue
		}
		return strconv.Atoi(fields[7])
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no connection from port %d to %d in %s", local, remote, path)
}
