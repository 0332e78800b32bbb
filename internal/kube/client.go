package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
)

// Client talks to one cluster's API server, in one namespace. It uses plain REST clients over
// k8s.io/api's types with a scheme of only the groups it needs (core, networking), rather than the
// generated clientset, whose scheme registers every API group at package initialisation: this
// package is linked into the binary that starts every local sandbox too.
type Client struct {
	config    *rest.Config
	core      *rest.RESTClient
	net       *rest.RESTClient
	apis      *rest.RESTClient
	Namespace string
	// Context is the kubeconfig context used ("" when none was named and the file had none).
	Context string
}

// ClientOptions picks the cluster.
type ClientOptions struct {
	// Kubeconfig is the file; empty follows KUBECONFIG and ~/.kube/config as kubectl does.
	Kubeconfig string
	// Context and Namespace override the kubeconfig's current ones.
	Context, Namespace string
}

// NewClient loads the kubeconfig as kubectl would and makes the REST clients.
func NewClient(opts ClientOptions) (*Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if opts.Kubeconfig != "" {
		rules.ExplicitPath = opts.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: opts.Context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kube: kubeconfig: %w", err)
	}
	ns := opts.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, fmt.Errorf("kube: kubeconfig namespace: %w", err)
		}
	}
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("kube: kubeconfig: %w", err)
	}
	c := &Client{config: cfg, Namespace: ns, Context: raw.CurrentContext}
	if opts.Context != "" {
		c.Context = opts.Context
	}
	sch := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(sch); err != nil {
			return nil, fmt.Errorf("kube: scheme: %w", err)
		}
	}
	metav1.AddToGroupVersion(sch, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(sch).WithoutConversion()
	mk := func(gv *schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
		rc := rest.CopyConfig(cfg)
		rc.GroupVersion = gv
		rc.APIPath = apiPath
		rc.NegotiatedSerializer = codecs
		rc.ContentType = runtime.ContentTypeJSON
		if rc.UserAgent == "" {
			rc.UserAgent = "cordon"
		}
		return rest.RESTClientFor(rc)
	}
	if c.core, err = mk(&corev1.SchemeGroupVersion, "/api"); err != nil {
		return nil, fmt.Errorf("kube: client: %w", err)
	}
	if c.net, err = mk(&networkingv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, fmt.Errorf("kube: client: %w", err)
	}
	if c.apis, err = mk(&schema.GroupVersion{}, "/apis"); err != nil {
		return nil, fmt.Errorf("kube: client: %w", err)
	}
	return c, nil
}

// Server is the API server's address, for messages.
func (c *Client) Server() string { return c.config.Host }

func (c *Client) createSecret(ctx context.Context, s *corev1.Secret) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	err := c.core.Post().Namespace(c.Namespace).Resource("secrets").Body(s).Do(ctx).Into(out)
	return out, err
}

func (c *Client) updateSecret(ctx context.Context, s *corev1.Secret) error {
	return c.core.Put().Namespace(c.Namespace).Resource("secrets").Name(s.Name).Body(s).Do(ctx).Error()
}

func (c *Client) createPod(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := c.core.Post().Namespace(c.Namespace).Resource("pods").Body(p).Do(ctx).Into(out)
	return out, err
}

func (c *Client) getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := c.core.Get().Namespace(c.Namespace).Resource("pods").Name(name).Do(ctx).Into(out)
	return out, err
}

func (c *Client) createNetworkPolicy(ctx context.Context, np *networkingv1.NetworkPolicy) error {
	return c.net.Post().Namespace(c.Namespace).Resource("networkpolicies").Body(np).Do(ctx).Error()
}

// deleteAll deletes what a run left, by name; a missing object is not an error.
func (c *Client) deleteRun(ctx context.Context, runID string) error {
	var errs []error
	grace := int64(0)
	opts := &metav1.DeleteOptions{GracePeriodSeconds: &grace}
	for _, d := range []struct {
		rc       *rest.RESTClient
		resource string
		name     string
	}{
		{c.core, "pods", PodName(runID)},
		{c.core, "secrets", SecretName(runID)},
		{c.net, "networkpolicies", PodName(runID) + "-egress"},
	} {
		err := d.rc.Delete().Namespace(c.Namespace).Resource(d.resource).Name(d.name).Body(opts).Do(ctx).Error()
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", d.resource, d.name, err))
		}
	}
	return errors.Join(errs...)
}

// DeleteRun deletes a run's pod, Secret and NetworkPolicy (cordon gc, and the end of every run).
func (c *Client) DeleteRun(ctx context.Context, runID string) error { return c.deleteRun(ctx, runID) }

// Leftovers lists the runs (their ids, as labelled) that still have a pod or Secret in the namespace.
func (c *Client) Leftovers(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	var ids []string
	for _, res := range []string{"pods", "secrets"} {
		var list metav1.PartialObjectMetadataList
		err := c.core.Get().Namespace(c.Namespace).Resource(res).
			Param("labelSelector", LabelManagedBy+"="+managedBy).
			SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").
			Do(ctx).Into(&list)
		if err != nil {
			return nil, fmt.Errorf("kube: listing %s: %w", res, err)
		}
		for _, o := range list.Items {
			if id := o.Labels[LabelRun]; id != "" && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// watchPod calls fn with every state of the pod until fn says done or ctx ends.
func (c *Client) watchPod(ctx context.Context, name string, fn func(*corev1.Pod) (bool, error)) error {
	for {
		p, err := c.getPod(ctx, name)
		if err != nil {
			return err
		}
		if done, err := fn(p); done || err != nil {
			return err
		}
		w, err := c.core.Get().Namespace(c.Namespace).Resource("pods").
			Param("fieldSelector", "metadata.name="+name).
			Param("resourceVersion", p.ResourceVersion).
			Param("watch", "true").Watch(ctx)
		if err != nil {
			return err
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				break
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				w.Stop()
				return fmt.Errorf("kube: pod %s was deleted", name)
			}
			if done, err := fn(p); done || err != nil {
				w.Stop()
				return err
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return err
		}
		// The watch ended (timeout, a compacted version): read the pod again and watch on.
	}
}

// stream opens a remote command (attach or exec) on the pod, over websockets with a fallback to
// SPDY for older servers.
func (c *Client) stream(ctx context.Context, req *rest.Request, opts remotecommand.StreamOptions) error {
	u := req.URL()
	ws, err := remotecommand.NewWebSocketExecutor(c.config, http.MethodGet, u.String())
	if err != nil {
		return fmt.Errorf("kube: websocket executor: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.config, http.MethodPost, u)
	if err != nil {
		return fmt.Errorf("kube: spdy executor: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return fmt.Errorf("kube: executor: %w", err)
	}
	return ex.StreamWithContext(ctx, opts)
}

func (c *Client) attachRequest(pod, container string, stdin, tty bool) *rest.Request {
	r := c.core.Post().Namespace(c.Namespace).Resource("pods").Name(pod).SubResource("attach").
		Param("container", container).Param("stdout", "true")
	if !tty {
		r = r.Param("stderr", "true")
	}
	if stdin {
		r = r.Param("stdin", "true")
	}
	if tty {
		r = r.Param("tty", "true")
	}
	return r
}

func (c *Client) execRequest(pod, container string, cmd []string) *rest.Request {
	r := c.core.Post().Namespace(c.Namespace).Resource("pods").Name(pod).SubResource("exec").
		Param("container", container).Param("stdout", "true").Param("stderr", "true")
	for _, a := range cmd {
		r = r.Param("command", a)
	}
	return r
}

// logs streams a container's log (follow) to w until it ends or ctx does.
func (c *Client) logs(ctx context.Context, pod, container string, follow bool, w io.Writer) error {
	r := c.core.Get().Namespace(c.Namespace).Resource("pods").Name(pod).SubResource("log").
		Param("container", container)
	if follow {
		r = r.Param("follow", "true")
	}
	rc, err := r.Stream(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return err
}

// HasAPI reports whether the cluster serves group/version (for agent-sandbox's CRDs).
func (c *Client) HasAPI(ctx context.Context, groupVersion string) (bool, error) {
	err := c.apis.Get().AbsPath("/apis/" + groupVersion).Do(ctx).Error()
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, err
	}
}

// Version asks the API server for its version (cordon doctor).
func (c *Client) Version(ctx context.Context) (string, error) {
	body, err := c.apis.Get().AbsPath("/version").DoRaw(ctx)
	if err != nil {
		return "", err
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := jsonUnmarshal(body, &v); err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// RuntimeClasses lists the cluster's RuntimeClass names (cordon doctor).
func (c *Client) RuntimeClasses(ctx context.Context) ([]string, error) {
	body, err := c.apis.Get().AbsPath("/apis/node.k8s.io/v1/runtimeclasses").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Handler string `json:"handler"`
		} `json:"items"`
	}
	if err := jsonUnmarshal(body, &list); err != nil {
		return nil, err
	}
	var out []string
	for _, it := range list.Items {
		out = append(out, it.Metadata.Name+" (handler "+it.Handler+")")
	}
	return out, nil
}
