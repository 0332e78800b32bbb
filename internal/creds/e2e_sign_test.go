package creds

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/cordon-sandbox/cordon/internal/creds/awssig"
)

// signForTest signs r as an AWS SDK inside the sandbox would, with keys.
func signForTest(t testing.TB, r *http.Request, keys awssig.Keys) {
	t.Helper()
	r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	if keys.SessionToken != "" {
		r.Header.Set("X-Amz-Security-Token", keys.SessionToken)
	}
	err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: keys.AccessKeyID, SecretAccessKey: keys.SecretAccessKey, SessionToken: keys.SessionToken},
		r, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
}
