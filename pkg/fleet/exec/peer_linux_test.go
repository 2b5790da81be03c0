package exec

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// A forward's listener serves its own user's connections and refuses
// another user's: any user of the machine can reach a loopback port.
func TestOwnUsers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accept := func() net.Conn {
		t.Helper()
		l.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	mine, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	c := accept()
	if !ownUsers(c) {
		t.Error("a connection of this process's user was refused")
	}
	c.Close()

	if os.Geteuid() != 0 {
		t.Skip("connecting as another user needs root")
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	other := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/"+port+"; sleep 5")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = other.Process.Kill()
		_ = other.Wait()
	}()
	c = accept()
	defer c.Close()
	if ownUsers(c) {
		t.Error("a connection of another user (nobody) was let through")
	}
	// Refused for its owner, not for a lookup that failed.
	uid, err := socketOwner("/proc/net/tcp", c.RemoteAddr().(*net.TCPAddr).Port, c.LocalAddr().(*net.TCPAddr).Port)
	if err != nil || uid != 65534 {
		t.Errorf("the other user's socket is owned by %d (%v), want 65534", uid, err)
	}
}
