package exec

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// Forward is a port of a Pod served on a local address, through the API
// server's port-forward as `kubectl port-forward` does it.
type Forward struct {
	// Address is host:port on 127.0.0.1.
	Address string
	l       net.Listener
	closed  chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// PortForward serves port of the Pod on 127.0.0.1 (a port the system
// picks) until Close: each connection to it is a stream to the port in the
// Pod, over a port-forward of its own (WebSocket first, SPDY where the API
// server refuses the upgrade), so one the Pod refuses — a server in the
// sandbox not listening yet — leaves the next free to get through.
//
// Every user of the machine can reach a loopback port, and through it the
// sandbox: only connections from this process's user (or root) are
// served, by the peer's socket owner (Linux; elsewhere every local
// connection is).
func PortForward(cfg *rest.Config, kc kubernetes.Interface, namespace, pod string, port int) (*Forward, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: give a port from 1 to 65535", port)
	}
	u := kc.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, cfg); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	f, err := forward(dialer, port)
	if err != nil {
		return nil, fmt.Errorf("forwarding port %d of pod %s/%s: %w", port, namespace, pod, err)
	}
	return f, nil
}

// forward serves port over dialer's port-forwards on a loopback port, to
// this process's user and root only.
func forward(dialer httpstream.Dialer, port int) (*Forward, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Forward{Address: l.Addr().String(), l: l, closed: make(chan struct{})}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !ownUsers(c) {
				c.Close()
				continue
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.relay(c, dialer, port)
			}()
		}
	}()
	return f, nil
}

// relay copies between c and port of the Pod, over a port-forward
// connection of its own, until either side closes or the forward does.
func (f *Forward) relay(c net.Conn, dialer httpstream.Dialer, port int) {
	defer c.Close()
	conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return
	}
	defer conn.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-f.closed:
			c.Close()
			conn.Close()
		case <-done:
		}
	}()
	// A forward is an error stream, which the kubelet writes why it could
	// not connect to, and a data stream, paired by the request id.
	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(port))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(headers)
	if err != nil {
		return
	}
	errStream.Close()
	go func() { _, _ = io.Copy(io.Discard, errStream) }()
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		return
	}
	go func() {
		_, _ = io.Copy(data, c)
		// The client is done sending: the sandbox's server reads EOF.
		data.Close()
	}()
	_, _ = io.Copy(c, data)
}

// Close stops serving the address, ends the connections it serves and
// frees it.
func (f *Forward) Close() {
	f.once.Do(func() {
		close(f.closed)
		f.l.Close()
	})
	f.wg.Wait()
}
