package cli_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// progressRun returns the plugin's command for a short run whose tasks
// take long enough for several progress updates.
func progressRun(t *testing.T, bin, ns string) *exec.Cmd {
	dir := write(t, map[string]string{"tasks.txt": "example.com/a:v1\nexample.com/a:v1\nexample.com/b:v1\nexample.com/b:v1\n"})
	return exec.Command(bin, "--kubeconfig", cluster.Kubeconfig(), "run", "-n", ns, "--tasks", filepath.Join(dir, "tasks.txt"),
		"--process", "local", "--progress-interval", "200ms", "--", "sleep", "0.5")
}

// Piped to files, a run's progress comes as plain lines and neither it nor
// the report carries a terminal control character.
func TestRunPipedHasNoControlCharacters(t *testing.T) {
	bin := buildPlugin(t)
	ns := cluster.NewNamespace(t)
	cmd := progressRun(t, bin, ns)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("run: %v\n%s%s", err, out.String(), errOut.String())
	}
	all := out.String() + errOut.String()
	for _, c := range all {
		if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
			t.Fatalf("piped output holds control character %q:\n%q", c, all)
		}
	}
	if n := strings.Count(errOut.String(), " tasks "); n < 2 {
		t.Errorf("%d progress lines, want several:\n%s", n, errOut.String())
	}
	if !strings.Contains(out.String(), "tasks") {
		t.Errorf("no report on stdout:\n%s", out.String())
	}
}

// On a terminal the progress line is rewritten in place: carriage return
// and erase-line, several times, and never a new line between updates.
func TestRunOnTerminalUpdatesInPlace(t *testing.T) {
	bin := buildPlugin(t)
	ns := cluster.NewNamespace(t)
	master, tty := openPTY(t)
	cmd := progressRun(t, bin, ns)
	cmd.Stdout, cmd.Stderr = tty, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var screen bytes.Buffer
	copied := make(chan error, 1)
	// Reading ends with EIO once the plugin, the last holder of the
	// terminal, exits.
	go func() { _, err := io.Copy(&screen, master); copied <- err }()
	err := cmd.Wait()
	<-copied
	if err != nil {
		t.Fatalf("run: %v\n%q", err, screen.String())
	}
	updates := strings.Split(screen.String(), "\r\x1b[K")
	if len(updates) < 4 {
		t.Fatalf("%d in-place updates of the progress line, want several:\n%q", len(updates)-1, screen.String())
	}
	for _, u := range updates[1 : len(updates)-1] {
		if strings.Contains(u, "\n") {
			t.Errorf("an update of the progress line ends its line: %q", u)
		}
	}
}

// openPTY opens a pseudo-terminal pair: the master end the test reads, the
// terminal the plugin writes to.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return master, tty
}
