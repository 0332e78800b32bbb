package creds

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretRedacts prints a Secret every way Go code might, alone and inside
// a struct, and finds the value nowhere; Reveal shows the check can see it.
func TestSecretRedacts(t *testing.T) {
	const value = "sk-ant-api03-REALVALUE"
	s := NewSecret(value)
	if s.Reveal() != value {
		t.Fatalf("Reveal = %q", s.Reveal())
	}
	wrapped := struct {
		Name string
		S    Secret
		P    *Secret
	}{"x", s, &s}
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		outs = append(outs, fmt.Sprintf(verb, s), fmt.Sprintf(verb, wrapped), fmt.Sprintf(verb, []Secret{s}))
	}
	outs = append(outs, fmt.Sprint(s), fmt.Sprintln(s), s.String(), s.GoString())
	j, err := json.Marshal(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	m, err := json.Marshal(map[Secret]int{s: 1})
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(j), string(m), fmt.Errorf("wrap: %v", s).Error())
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "secret", s, "wrapped", wrapped)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "secret", s)
	outs = append(outs, logged.String())
	for _, o := range outs {
		if strings.Contains(o, value) || strings.Contains(o, "REALVALUE") || strings.Contains(strings.ToLower(o), fmt.Sprintf("%x", "REALVALUE")) {
			t.Errorf("secret printed: %s", o)
		}
	}
	if !strings.Contains(fmt.Sprint(s), "[redacted]") {
		t.Errorf("fmt.Sprint(s) = %q, want [redacted]", fmt.Sprint(s))
	}
}

// TestHoldersRedact: types that hold a real value print none of it, even
// where fmt prints unexported fields raw (it does not call their methods).
func TestHoldersRedact(t *testing.T) {
	const value = "REALVALUE-from-command"
	file := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(file, []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
	c := FromCommand([]string{"cat", file}, nil, nil)
	if s, err := c.Secret(context.Background()); err != nil || s.Reveal() != value {
		t.Fatalf("command: %q %v", s.Reveal(), err)
	}
	env := FromEnv([]string{"K=" + value}, "K")
	holder := struct {
		secret Secret
		cmd    *CommandSource
		env    EnvSource
	}{NewSecret(value), c, *env}
	var outs []string
	for _, v := range []any{c, env, *env, holder, &holder, SourceFuncs{}} {
		outs = append(outs, fmt.Sprintf("%v|%+v|%#v|%s|%x", v, v, v, v, v))
	}
	for _, o := range outs {
		if strings.Contains(o, "REALVALUE") || strings.Contains(o, fmt.Sprintf("%x", "REALVALUE")) {
			t.Errorf("printed the value: %s", o)
		}
	}
}
