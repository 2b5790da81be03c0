package exec

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
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

// countingDialer stands in for the API server's port-forward, which is
// not what this test is about: it counts the forwards asked for and
// makes none.
type countingDialer struct{ dials atomic.Int32 }

func (d *countingDialer) Dial(...string) (httpstream.Connection, string, error) {
	d.dials.Add(1)
	return nil, "", errors.New("no API server in this test")
}

// A Forward closes another user's connection unanswered, asking the API
// server for nothing, and forwards its own user's.
func TestForwardServesOnlyItsUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("connecting as another user needs root")
	}
	d := &countingDialer{}
	f, err := forward(d, 8000)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, port, _ := net.SplitHostPort(f.Address)
	// nobody connects and reads until the Forward closes the connection.
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c",
		"exec 3<>/dev/tcp/127.0.0.1/"+port+" && cat <&3 && echo closed").CombinedOutput()
	if err != nil || string(out) != "closed\n" {
		t.Fatalf("nobody's connection: %v, %q; want it closed unanswered", err, out)
	}
	mine, err := net.Dial("tcp", f.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	// The accept loop takes connections in turn: once this user's was
	// forwarded, nobody's was judged before it.
	deadline := time.Now().Add(10 * time.Second)
	for d.dials.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := d.dials.Load(); n != 1 {
		t.Errorf("%d forwards asked for, want 1: this user's connection, not nobody's", n)
	}
}
