package serve

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1/fleetv1connect"
)

// Access says where and how the API is served.
type Access struct {
	// Address is unix:///path (or a path) for a unix socket, or host:port.
	Address string
	// Token is the bearer token every call must carry; TCP needs one.
	Token string
	// CertFile and KeyFile, when set, serve TLS; a host other than
	// loopback needs them.
	CertFile, KeyFile string
	// Kube, when set, admits callers by their ServiceAccount tokens
	// instead of Token.
	Kube *KubeAuth
	// BodyBudget bounds the bytes of call bodies held at once; zero:
	// DefaultBodyBudget.
	BodyBudget int64
}

// Listen checks a and opens its listener. A unix socket is made mode 0600
// in a directory only its owner may write (made mode 0700, or refused
// when it is not its owner's alone); TCP needs a token — any user of the machine can reach a loopback
// port — and TLS beyond loopback, where the token would cross the network.
func Listen(a Access) (net.Listener, string, error) {
	if path, ok := unixPath(a.Address); ok {
		return listenUnix(a.Address, path)
	}
	host, _, err := net.SplitHostPort(a.Address)
	if err != nil {
		return nil, "", fmt.Errorf("--listen %q: give unix:///PATH, a socket path, or HOST:PORT (%v)", a.Address, err)
	}
	if a.Token == "" && a.Kube == nil {
		return nil, "", fmt.Errorf("--listen %s: every user of this machine can reach a TCP port and would run commands in your sandboxes: serve with a token (--token-file) or to ServiceAccounts (--allow-service-account), or on a unix socket", a.Address)
	}
	if !loopback(host) && a.CertFile == "" {
		return nil, "", fmt.Errorf("--listen %s: the bearer token would cross the network in the clear: serve TLS (--tls-cert-file and --tls-key-file), or listen on loopback", a.Address)
	}
	l, err := net.Listen("tcp", a.Address)
	if err != nil {
		return nil, "", fmt.Errorf("--listen %s: %w", a.Address, err)
	}
	scheme := "http"
	if a.CertFile != "" {
		scheme = "https"
	}
	return l, scheme + "://" + l.Addr().String(), nil
}

// ResolveToken sets a.Token from tokenFile, a file only its owner may
// read. TCP needs a token: when tokenFile does not exist a fresh one is
// written there (mode 0600), and without tokenFile into a new private
// directory that cleanup removes. It returns the file the token is in
// ("" when a unix socket, or ServiceAccounts' tokens, go without one).
func ResolveToken(a *Access, tokenFile string) (file string, cleanup func(), err error) {
	cleanup = func() {}
	if _, unix := unixPath(a.Address); (unix || a.Kube != nil) && tokenFile == "" {
		return "", cleanup, nil
	}
	if tokenFile == "" {
		dir, err := os.MkdirTemp("", "sandbox-fleet-token-")
		if err != nil {
			return "", cleanup, err
		}
		cleanup = func() { os.RemoveAll(dir) }
		tokenFile = filepath.Join(dir, "token")
	}
	b, err := os.ReadFile(tokenFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		token := make([]byte, 32)
		if _, err := rand.Read(token); err != nil {
			return "", cleanup, err
		}
		a.Token = hex.EncodeToString(token)
		err = os.WriteFile(tokenFile, []byte(a.Token+"\n"), 0o600)
		if err != nil {
			err = fmt.Errorf("--token-file %s: writing a new token: %w", tokenFile, err)
		}
		return tokenFile, cleanup, err
	case err != nil:
		return "", cleanup, fmt.Errorf("--token-file: %w", err)
	}
	if fi, err := os.Stat(tokenFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return "", cleanup, fmt.Errorf("--token-file %s is mode %04o: other users can read the token; chmod 600 it", tokenFile, fi.Mode().Perm())
	}
	if a.Token = strings.TrimSpace(string(b)); a.Token == "" {
		return "", cleanup, fmt.Errorf("--token-file %s is empty: put a token in it, or name a file that does not exist for serve to write one", tokenFile)
	}
	return tokenFile, cleanup, nil
}

// listenUnix opens the socket path in a directory only its user may
// write: anyone else who could would replace the socket with their own.
func listenUnix(address, path string) (net.Listener, string, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("--listen %s: %w", address, err)
	}
	if err := privateDir(dir); err != nil {
		return nil, "", fmt.Errorf("--listen %s: %w", address, err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		// A socket left by a server that died; nothing listens there
		// if connecting fails.
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, "", fmt.Errorf("--listen %s: another server is listening there", address)
		}
		os.Remove(path)
	}
	// The socket is made with no access but its owner's from the start.
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, "", fmt.Errorf("--listen %s: %w", address, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, "", err
	}
	return l, "unix://" + path, nil
}

// privateDir refuses a directory another user could reach a socket in:
// owned by another, or open to its group or others at all — the socket
// is made mode 0600, but a directory others may enter lets them see it
// appear, and write, replace it.
func privateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("directory %s: cannot read its owner", dir)
	}
	if int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("directory %s is mode %04o, owned by uid %d: other users could replace the socket there; use a directory of yours that only you may write (chmod 700)",
			dir, fi.Mode().Perm(), st.Uid)
	}
	return nil
}

func unixPath(addr string) (string, bool) {
	if p, ok := strings.CutPrefix(addr, "unix://"); ok {
		return p, true
	}
	return addr, strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, ".")
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve serves v on l until ctx ends or a client closes the session, then
// stops taking calls, waits a moment for calls in flight, and returns.
func Serve(ctx context.Context, l net.Listener, v *Service, a Access) error {
	mux := http.NewServeMux()
	path, handler := fleetv1connect.NewFleetServiceHandler(v, connect.WithReadMaxBytes(maxMessage), connect.WithInterceptors(traced{}, callers{v.Session}))
	mux.Handle(path, handler)
	var h http.Handler = withBudget(cmp.Or(a.BodyBudget, DefaultBodyBudget), mux)
	switch {
	case a.Kube != nil:
		h = a.Kube.Wrap(h)
	case a.Token != "":
		h = bearer(a.Token, h)
	}
	// No read or write timeout: a command's output streams as long as it
	// runs. Headers must come promptly, and an idle connection is let go.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute, MaxHeaderBytes: 64 << 10,
		Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	srv.Protocols.SetHTTP2(true)
	errc := make(chan error, 1)
	go func() {
		var err error
		if a.CertFile != "" {
			srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			err = srv.ServeTLS(l, a.CertFile, a.KeyFile)
		} else {
			err = srv.Serve(l)
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	case <-v.Closed():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// bearer lets through only requests that carry token.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			refuse(w, http.StatusUnauthorized, "unauthenticated", "a bearer token is required: send Authorization: Bearer <the serve --token-file's token>")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refuse answers a call with a Connect error, before it reaches the
// service.
func refuse(w http.ResponseWriter, status int, code, message string) {
	body, _ := json.Marshal(map[string]string{"code": code, "message": message})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}
