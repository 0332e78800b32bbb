package awssig

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnvKeys(t *testing.T) {
	ctx := context.Background()
	k, err := EnvKeys{Environ: []string{"AWS_ACCESS_KEY_ID=AKIAENV", "AWS_SECRET_ACCESS_KEY=envsecret", "AWS_SESSION_TOKEN=envtoken"}}.Keys(ctx)
	if err != nil || k.AccessKeyID != "AKIAENV" || k.SecretAccessKey != "envsecret" || k.SessionToken != "envtoken" {
		t.Fatalf("= %#v, %v", k, err)
	}
	src := EnvKeys{Environ: []string{"AWS_ACCESS_KEY_ID=AKIAENV", "AWS_SECRET_ACCESS_KEY=envsecret"}}
	if out := fmt.Sprintf("%v %+v %#v", src, src, struct{ S any }{src}); strings.Contains(out, "envsecret") {
		t.Fatalf("printed the environment: %s", out)
	}
	if _, err := (EnvKeys{Environ: []string{"AWS_ACCESS_KEY_ID=AKIAENV"}}).Keys(ctx); err == nil || !strings.Contains(err.Error(), "no secret access key") {
		t.Fatalf("missing secret: %v", err)
	}
}

func TestProfileKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "credentials")
	const file = `# comment
[default]
aws_access_key_id = AKIADEFAULT
aws_secret_access_key = defaultsecret

[work]
; another comment
aws_access_key_id=AKIAWORK
aws_secret_access_key=worksecret
aws_session_token = worktoken
region = eu-west-3

[profile sso]
sso_session = corp
sso_account_id = 1

[broken]
aws_access_key_id = AKIABROKEN
`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		profile, id, secret, token, err string
	}{
		{"", "AKIADEFAULT", "defaultsecret", "", ""},
		{"work", "AKIAWORK", "worksecret", "worktoken", ""},
		{"sso", "", "", "", "uses sso_session"},
		{"broken", "", "", "", "no secret access key"},
		{"absent", "", "", "", `no profile "absent"`},
	}
	for _, tt := range tests {
		k, err := ProfileKeys{Path: path, Profile: tt.profile}.Keys(ctx)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err = %v, want %q", tt.profile, err, tt.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") && strings.Contains(err.Error(), "defaultsecret") {
				t.Errorf("error holds a secret: %v", err)
			}
			continue
		}
		if err != nil || k.AccessKeyID != tt.id || k.SecretAccessKey != tt.secret || k.SessionToken != tt.token {
			t.Errorf("%s: = %#v, %v", tt.profile, k, err)
		}
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", path)
	if k, err := (ProfileKeys{Profile: "work"}).Keys(ctx); err != nil || k.AccessKeyID != "AKIAWORK" {
		t.Errorf("via AWS_SHARED_CREDENTIALS_FILE: %v %v", k, err)
	}
	if err := os.WriteFile(path, []byte("[default\naws_access_key_id=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (ProfileKeys{Path: path}).Keys(ctx); err == nil || !strings.Contains(err.Error(), "line 1: malformed") {
		t.Errorf("malformed file: %v", err)
	}
}
