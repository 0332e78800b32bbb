package kube

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/warn"
)

// Client talks to one cluster's API server, in one namespace, over its REST API: JSON over HTTPS
// for objects, a streamed watch for the pod, and the websocket channel protocol for attach and exec.
// It reads the kubeconfig as kubectl does (contexts, client certificates, tokens, token files, basic
// auth and exec credential plugins).
type Client struct {
	cfg  *restConfig
	http *http.Client
	// Namespace is where the run's objects go; Context the kubeconfig context used.
	Namespace string
	Context   string
}

// ClientOptions picks the cluster.
type ClientOptions struct {
	// Kubeconfig is the file; empty follows KUBECONFIG and ~/.kube/config as kubectl does.
	Kubeconfig string
	// Context and Namespace override the kubeconfig's current ones.
	Context, Namespace string
	// Getenv reads the environment (KUBECONFIG, HOME); nil is os.Getenv.
	Getenv func(string) string
}

// NewClient loads the kubeconfig and makes the client. It talks to nothing yet.
func NewClient(opts ClientOptions) (*Client, error) {
	env := opts.Getenv
	if env == nil {
		env = os.Getenv
	}
	cfg, err := loadConfig(opts.Kubeconfig, opts.Context, opts.Namespace, env)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	tr := &http.Transport{
		Proxy:               cfg.Proxy,
		TLSClientConfig:     cfg.TLS,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{cfg: cfg, http: &http.Client{Transport: tr}, Namespace: cfg.Namespace, Context: cfg.Context}, nil
}

// Server is the API server's address, for messages.
func (c *Client) Server() string { return c.cfg.Host }

// APIError is an answer of the API server other than success.
type APIError struct {
	Code    int
	Reason  string
	Message string
}

func (e *APIError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("%d %s", e.Code, e.Reason)
}

// IsNotFound reports whether err is the API server's 404.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == http.StatusNotFound
}

// request makes an authenticated request to path (with query).
func (c *Client) request(ctx context.Context, method, path string, q url.Values, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := c.cfg.Host + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	r, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	r.Header.Set("Accept", "application/json")
	r.Header.Set("User-Agent", "cordon")
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if c.cfg.auth != nil {
		if err := c.cfg.auth.apply(ctx, r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// do sends a request and decodes the answer into out (nil discards it).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	r, err := c.request(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	return c.send(r, out)
}

// doAs is do with a body of the given content type (a patch).
func (c *Client) doAs(ctx context.Context, method, path, contentType string, body, out any) error {
	r, err := c.request(ctx, method, path, nil, body)
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", contentType)
	return c.send(r, out)
}

// send sends r and decodes the answer into out (nil discards it).
func (c *Client) send(r *http.Request, out any) error {
	method, path := r.Method, r.URL.Path
	resp, err := c.http.Do(r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return apiError(resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decoding %s %s: %w", method, path, err)
		}
	}
	return nil
}

// apiError is the error of an answer with status code and body: the API's Status when the body is
// one, else the body's start, printable (a proxy's HTML page, or anything a server sends, must not
// fill or drive the user's terminal).
func apiError(code int, body []byte) error {
	var st status
	if json.Unmarshal(body, &st) == nil && (st.Message != "" || st.Reason != "") {
		return &APIError{Code: code, Reason: st.Reason, Message: warn.Printable(st.Message, maxErrorText)}
	}
	return &APIError{Code: code, Message: fmt.Sprintf("%d %s: %s", code, http.StatusText(code), warn.Printable(strings.TrimSpace(string(body)), maxErrorText))}
}

// maxErrorText bounds the text an API error carries from the server's answer.
const maxErrorText = 2048

func (c *Client) nsPath(group, resource, name string) string {
	p := "/api/v1"
	if group != "" {
		p = "/apis/" + group
	}
	p += "/namespaces/" + url.PathEscape(c.Namespace) + "/" + resource
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// createSecret creates s and returns the Secret the API server stored, decoded and as it was sent
// back.
func (c *Client) createSecret(ctx context.Context, s *Secret) (*Secret, []byte, error) {
	return create[Secret](ctx, c, c.nsPath("", "secrets", ""), s)
}

// create posts obj to path and returns the object the API server stored, decoded and as it was sent
// back (for the check that it is what was sent: admission.go).
func create[T any](ctx context.Context, c *Client, path string, obj any) (*T, []byte, error) {
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodPost, path, nil, obj, &raw); err != nil {
		return nil, nil, err
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, nil, fmt.Errorf("decoding the created object: %w", err)
	}
	return out, raw, nil
}

// updateSecret replaces s and returns the Secret the API server stored, as it was sent back.
func (c *Client) updateSecret(ctx context.Context, s *Secret) ([]byte, error) {
	var raw json.RawMessage
	return raw, c.do(ctx, http.MethodPut, c.nsPath("", "secrets", s.Name), nil, s, &raw)
}

// createPod creates p and returns the pod the API server stored, decoded and as it was sent back.
func (c *Client) createPod(ctx context.Context, p *Pod) (*Pod, []byte, error) {
	return create[Pod](ctx, c, c.nsPath("", "pods", ""), p)
}

// ungate removes the pod's GateAdmitted scheduling gate once check passes on the pod as stored, on
// condition that it is still the version checked (a JSON patch's test of the resource version): a pod
// changed since is read and checked again (the scheduler records, in the pod's status, that it is gated),
// and one that no longer passes is not let run.
func (c *Client) ungate(ctx context.Context, name string, check func(stored []byte) error) error {
	path := c.nsPath("", "pods", name)
	var err error
	for range 5 {
		var raw json.RawMessage
		if err = c.do(ctx, http.MethodGet, path, nil, nil, &raw); err != nil {
			return err
		}
		if err = check(raw); err != nil {
			return err
		}
		var p Pod
		if err = json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("decoding the pod: %w", err)
		}
		i := slices.IndexFunc(p.Spec.SchedulingGates, func(g SchedulingGate) bool { return g.Name == GateAdmitted })
		if i < 0 {
			return fmt.Errorf("the pod has no %s gate", GateAdmitted)
		}
		// cordon's gate alone: another's (a queue's) stays and holds the pod until that one lets go.
		at := fmt.Sprintf("/spec/schedulingGates/%d", i)
		patch := []map[string]any{
			{"op": "test", "path": "/metadata/resourceVersion", "value": p.ResourceVersion},
			{"op": "test", "path": at + "/name", "value": GateAdmitted},
			{"op": "remove", "path": at},
		}
		err = c.doAs(ctx, http.MethodPatch, path, "application/json-patch+json", patch, nil)
		var api *APIError
		if !errors.As(err, &api) || (api.Code != http.StatusUnprocessableEntity && api.Code != http.StatusConflict) {
			return err
		}
	}
	return fmt.Errorf("the pod kept changing: %w", err)
}

func (c *Client) getPod(ctx context.Context, name string) (*Pod, error) {
	out := &Pod{}
	return out, c.do(ctx, http.MethodGet, c.nsPath("", "pods", name), nil, nil, out)
}

// createNetworkPolicy creates np and returns the object the API server stored, as it was sent back.
func (c *Client) createNetworkPolicy(ctx context.Context, np *NetworkPolicy) ([]byte, error) {
	var raw json.RawMessage
	return raw, c.do(ctx, http.MethodPost, c.nsPath("networking.k8s.io/v1", "networkpolicies", ""), nil, np, &raw)
}

// DeleteRun deletes a run's pod, Secret and NetworkPolicy (cordon gc, and the end of every run); a
// missing object is not an error.
func (c *Client) DeleteRun(ctx context.Context, runID string) error {
	var errs []error
	body := map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "propagationPolicy": "Background"}
	for _, d := range []struct{ group, resource, name string }{
		{"", "pods", PodName(runID)},
		{"", "secrets", SecretName(runID)},
		{"networking.k8s.io/v1", "networkpolicies", PodName(runID) + "-egress"},
	} {
		err := c.do(ctx, http.MethodDelete, c.nsPath(d.group, d.resource, d.name), nil, body, nil)
		if err != nil && !IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", d.resource, d.name, err))
		}
	}
	return errors.Join(errs...)
}

// watchPod calls fn with every state of the pod until fn says done or ctx ends.
func (c *Client) watchPod(ctx context.Context, name string, fn func(*Pod) (bool, error)) error {
	var backoff time.Duration
	for {
		p, err := c.getPod(ctx, name)
		if err != nil {
			return err
		}
		if done, err := fn(p); done || err != nil {
			return err
		}
		q := url.Values{"fieldSelector": {"metadata.name=" + name}, "resourceVersion": {p.ResourceVersion},
			"watch": {"true"}, "allowWatchBookmarks": {"false"}, "timeoutSeconds": {"300"}}
		r, err := c.request(ctx, http.MethodGet, c.nsPath("", "pods", ""), q, nil)
		if err != nil {
			return err
		}
		resp, err := c.http.Do(r)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			return apiError(resp.StatusCode, data)
		}
		started := time.Now()
		dec := json.NewDecoder(resp.Body)
		for {
			var ev watchEvent
			if err := dec.Decode(&ev); err != nil {
				break // the watch ended (its timeout, a broken stream): read the pod again
			}
			switch ev.Type {
			case "DELETED":
				resp.Body.Close()
				return fmt.Errorf("kube: pod %s was deleted", name)
			case "ADDED", "MODIFIED":
				if done, err := fn(&ev.Object); done || err != nil {
					resp.Body.Close()
					return err
				}
			}
		}
		resp.Body.Close()
		// A watch that ends at once (a proxy that cuts streams, an API server that refuses the
		// version) is not made again at once: the pod is read and watched again at most every few
		// seconds until a watch lasts.
		if time.Since(started) < watchBackoffMax {
			backoff = min(max(2*backoff, 100*time.Millisecond), watchBackoffMax)
		} else {
			backoff = 0
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// watchBackoffMax bounds the wait between watches of a pod that keep ending at once.
const watchBackoffMax = 5 * time.Second

// logs streams a container's log (follow) to w until it ends or ctx does.
func (c *Client) logs(ctx context.Context, pod, container string, follow bool, w io.Writer) error {
	q := url.Values{"container": {container}}
	if follow {
		q.Set("follow", "true")
	}
	r, err := c.request(ctx, http.MethodGet, c.nsPath("", "pods", pod)+"/log", q, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return apiError(resp.StatusCode, data)
	}
	_, err = io.Copy(w, bufio.NewReader(resp.Body))
	return err
}

// HasAPI reports whether the cluster serves group/version (for agent-sandbox's CRDs).
func (c *Client) HasAPI(ctx context.Context, groupVersion string) (bool, error) {
	err := c.do(ctx, http.MethodGet, "/apis/"+groupVersion, nil, nil, nil)
	switch {
	case err == nil:
		return true, nil
	case IsNotFound(err):
		return false, nil
	default:
		return false, err
	}
}

// Version asks the API server for its version (cordon doctor).
func (c *Client) Version(ctx context.Context) (string, error) {
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	err := c.do(ctx, http.MethodGet, "/version", nil, nil, &v)
	return v.GitVersion, err
}

// RuntimeClasses lists the cluster's RuntimeClasses as "name (handler h)" (cordon doctor).
func (c *Client) RuntimeClasses(ctx context.Context) ([]string, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Handler string `json:"handler"`
		} `json:"items"`
	}
	if err := c.do(ctx, http.MethodGet, "/apis/node.k8s.io/v1/runtimeclasses", nil, nil, &list); err != nil {
		return nil, err
	}
	var out []string
	for _, it := range list.Items {
		out = append(out, it.Metadata.Name+" (handler "+it.Handler+")")
	}
	return out, nil
}

// MinorVersion reads "v1.37.2" (or "v1.30.1-gke.1") as 1 and 37.
func MinorVersion(v string) (major, minor int, ok bool) {
	_, err := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &major, &minor)
	return major, minor, err == nil
}
