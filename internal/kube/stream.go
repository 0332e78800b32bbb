package kube

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/coder/websocket"
)

// The channel protocol of exec and attach over websockets (Kubernetes 1.30 and later): every
// binary message starts with its stream's number; v5 adds a message that closes one stream, which
// is how stdin ends.
const (
	channelProtocol = "v5.channel.k8s.io"
	chanStdin       = 0
	chanStdout      = 1
	chanStderr      = 2
	chanError       = 3
	chanResize      = 4
	chanClose       = 255
)

// TermSize is a terminal's size in characters.
type TermSize struct {
	Width  uint16 `json:"Width"`
	Height uint16 `json:"Height"`
}

// streamOptions are the streams of one attach or exec.
type streamOptions struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	// Resize gives the terminal's size as it changes (TTY only).
	Resize <-chan TermSize
}

// ExitError is a command run by exec that exited non-zero.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// stream runs an attach or exec (path is the pod's subresource) and relays the streams until the
// API server closes it; the error channel's status is the result.
func (c *Client) stream(ctx context.Context, path string, q url.Values, o streamOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := c.request(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	// The upgrade is refused (406) when it asks for JSON: the answer is a stream, not an object.
	r.Header.Del("Accept")
	u := *r.URL
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	case "http":
		u.Scheme = "ws"
	}
	// Websockets upgrade HTTP/1.1 connections only: a transport of its own, without HTTP/2.
	tlsc := c.cfg.TLS.Clone()
	tlsc.NextProtos = []string{"http/1.1"}
	hc := &http.Client{Transport: &http.Transport{Proxy: c.cfg.Proxy, TLSClientConfig: tlsc,
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient: hc, HTTPHeader: r.Header, Subprotocols: []string{channelProtocol},
	})
	if err != nil {
		if resp != nil && resp.StatusCode/100 != 1 && resp.StatusCode != 0 {
			return fmt.Errorf("kube: %s: %s", strings.TrimPrefix(path, c.nsPath("", "", "")), resp.Status)
		}
		return fmt.Errorf("kube: opening %s: %w", path, err)
	}
	defer conn.CloseNow()
	if p := conn.Subprotocol(); p != channelProtocol {
		return fmt.Errorf("kube: the API server does not speak %s (Kubernetes 1.30 or later is needed)", channelProtocol)
	}
	conn.SetReadLimit(32 << 20)

	var wmu sync.Mutex
	send := func(ch byte, data []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return conn.Write(ctx, websocket.MessageBinary, append([]byte{ch}, data...))
	}
	if o.Resize != nil {
		// The terminal's size as it is goes before the first byte of stdin (the attach hello), so that
		// the command finds it when it starts.
		select {
		case sz, ok := <-o.Resize:
			if ok {
				b, _ := json.Marshal(sz)
				if err := send(chanResize, b); err != nil {
					return fmt.Errorf("kube: stream: %w", err)
				}
			}
		default:
		}
	}
	if o.Stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := o.Stdin.Read(buf)
				if n > 0 {
					if send(chanStdin, buf[:n]) != nil {
						return
					}
				}
				if err != nil {
					_ = send(chanClose, []byte{chanStdin})
					return
				}
			}
		}()
	}
	if o.Resize != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case sz, ok := <-o.Resize:
					if !ok {
						return
					}
					b, _ := json.Marshal(sz)
					if send(chanResize, b) != nil {
						return
					}
				}
			}
		}()
	}
	var result error
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure || errors.Is(err, io.EOF) {
				return result
			}
			if result != nil {
				return result
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("kube: stream: %w", err)
		}
		if typ != websocket.MessageBinary || len(data) == 0 {
			continue
		}
		ch, data := data[0], data[1:]
		switch ch {
		case chanStdout:
			if o.Stdout != nil {
				if _, err := o.Stdout.Write(data); err != nil {
					return err
				}
			}
		case chanStderr:
			if o.Stderr != nil {
				if _, err := o.Stderr.Write(data); err != nil {
					return err
				}
			}
		case chanError:
			result = streamStatus(data)
		}
	}
}

// streamStatus reads the error channel's status: success, a command's exit code, or a failure.
func streamStatus(data []byte) error {
	var st status
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("kube: stream status: %w", err)
	}
	if st.Status == "Success" {
		return nil
	}
	if st.Reason == "NonZeroExitCode" && st.Details != nil {
		for _, c := range st.Details.Causes {
			if c.Reason == "ExitCode" {
				var code int
				if _, err := fmt.Sscanf(c.Message, "%d", &code); err == nil {
					return &ExitError{Code: code}
				}
			}
		}
	}
	return fmt.Errorf("kube: %s", st.Message)
}

func (c *Client) attach(ctx context.Context, pod, container string, o streamOptions) error {
	q := url.Values{"container": {container}, "stdout": {"true"}, "stdin": {fmt.Sprint(o.Stdin != nil)}}
	if o.TTY {
		q.Set("tty", "true")
	} else {
		q.Set("stderr", "true")
	}
	return c.stream(ctx, c.nsPath("", "pods", pod)+"/attach", q, o)
}

func (c *Client) exec(ctx context.Context, pod, container string, cmd []string, o streamOptions) error {
	q := url.Values{"container": {container}, "stdout": {"true"}, "stderr": {"true"}, "stdin": {fmt.Sprint(o.Stdin != nil)}, "command": cmd}
	return c.stream(ctx, c.nsPath("", "pods", pod)+"/exec", q, o)
}
