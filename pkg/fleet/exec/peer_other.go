//go:build !linux

package exec

import "net"

// ownUsers lets every local connection through where the system does not
// list sockets' owners.
func ownUsers(net.Conn) bool { return true }
