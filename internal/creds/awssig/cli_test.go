package awssig

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestAWSCLI: the real AWS CLI, holding only placeholder keys, talks to an
// AWS-like upstream through a gateway that re-signs. For every request the
// gateway first checks the signature as it arrived: valid for the
// placeholder keys (the CLI signed it) and invalid for the real ones (so
// the upstream would refuse it as sent); the upstream then verifies the
// re-signed request with the real keys. Covers STS (form body, hashed by the
// gateway), an S3 upload (the CLI's aws-chunked body with an unsigned
// trailer) and an S3 presigned URL fetched with curl.
func TestAWSCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the AWS CLI three times (seconds each on a busy machine)")
	}
	for _, tool := range []string{"aws", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	real := Keys{AccessKeyID: "AKIAREALREALREAL1234", SecretAccessKey: "REALsecretREALsecretREALsecretREALsecret", SessionToken: "REALsessiontoken"}
	ph, rs := newResigner(t, real)

	var mu sync.Mutex
	var got []string // "METHOD path payload-kind", per verified request
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifySigV4(r, body, real.AccessKeyID, real.SecretAccessKey, real.SessionToken); err != nil {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "<Error><Code>%s</Code><Message>refused</Message></Error>", err)
			return
		}
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("X-Amz-Content-Sha256"))
		mu.Unlock()
		switch {
		case r.Method == "POST" && strings.Contains(string(body), "GetCallerIdentity"):
			w.Header().Set("Content-Type", "text/xml")
			fmt.Fprint(w, `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><GetCallerIdentityResult><Arn>arn:aws:iam::123456789012:user/agent</Arn><UserId>AIDAEXAMPLE</UserId><Account>123456789012</Account></GetCallerIdentityResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></GetCallerIdentityResponse>`)
		case r.Method == "PUT":
			w.Header().Set("ETag", `"d41d8cd98f00b204e9800998ecf8427e"`)
		default:
			fmt.Fprint(w, "object content")
		}
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host
	}}
	var gatewayErrs []string
	gateway := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		asSent := r.Clone(r.Context())
		errPH := verifySigV4(asSent, body, ph.AccessKeyID, ph.SecretAccessKey, ph.SessionToken)
		errReal := verifySigV4(asSent, body, real.AccessKeyID, real.SecretAccessKey, real.SessionToken)
		if errPH != nil || errReal == nil {
			mu.Lock()
			gatewayErrs = append(gatewayErrs, fmt.Sprintf("%s %s as sent: placeholder keys %v, real keys %v", r.Method, r.URL.Path, errPH, errReal))
			mu.Unlock()
		}
		if ok, err := rs.Resign(r); !ok || err != nil {
			http.Error(w, fmt.Sprintf("not re-signed: %v", err), http.StatusForbidden)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer gateway.Close()

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: gateway.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "upload.txt")
	if err := os.WriteFile(file, []byte("hello from the sandbox\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"AWS_DEFAULT_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true", "AWS_CA_BUNDLE=" + ca, "AWS_PAGER=",
		"AWS_ACCESS_KEY_ID=" + ph.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + ph.SecretAccessKey, "AWS_SESSION_TOKEN=" + ph.SessionToken}
	if pyenv := os.Getenv("PYENV_ROOT"); pyenv != "" {
		env = append(env, "PYENV_ROOT="+pyenv)
	}
	// The three CLI runs are independent: run them at once (the CLI's
	// start-up dominates).
	runs := [][]string{
		{"sts", "get-caller-identity"},
		{"s3", "cp", file, "s3://bucket/dir/upload.txt"},
		// In us-east-1 the CLI presigns with Signature Version 2, which is
		// refused; SigV4 elsewhere.
		{"s3", "presign", "s3://bucket/dir/a b.txt", "--expires-in", "300", "--region", "eu-west-3"},
	}
	outs := make([]string, len(runs))
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, args := range runs {
		wg.Go(func() {
			cmd := exec.Command("aws", append([]string{"--endpoint-url", gateway.URL}, args...)...)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			outs[i], errs[i] = string(out), err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("aws %v: %v\n%s", runs[i], err, outs[i])
		}
	}
	if !strings.Contains(outs[0], "arn:aws:iam::123456789012:user/agent") {
		t.Fatalf("sts get-caller-identity: %s", outs[0])
	}
	presigned := strings.TrimSpace(outs[2])
	out, err := exec.Command("curl", "-sS", "--fail-with-body", "--cacert", ca, presigned).CombinedOutput()
	if err != nil || string(out) != "object content" {
		t.Fatalf("curl the presigned URL: %v\n%s", err, out)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(gatewayErrs) > 0 {
		t.Fatalf("requests as the CLI sent them:\n%s", strings.Join(gatewayErrs, "\n"))
	}
	joined := strings.Join(got, "\n")
	for _, want := range []string{"POST / ", "PUT /bucket/dir/upload.txt ", "GET /bucket/dir/a b.txt "} {
		if !strings.Contains(joined, want) {
			t.Errorf("upstream did not verify %q; it verified:\n%s", want, joined)
		}
	}
	t.Logf("verified upstream:\n%s", joined)
}
