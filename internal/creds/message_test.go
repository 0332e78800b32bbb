package creds

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestModifyMessage: a websocket message to a host whose credential allows the body gets the real
// value (which then joins Redactions); a placeholder of a credential that does not allow it, or
// bound elsewhere, stays and is reported as misuse.
func TestModifyMessage(t *testing.T) {
	set, ph, _ := testSet(t)
	ctx := context.Background()
	if !set.InMessages("body.example.com") || set.InMessages("api.example.com") || set.InMessages("other.example.com") {
		t.Fatal("InMessages: want body.example.com alone")
	}
	out, in, mis, err := set.ModifyMessage(ctx, "body.example.com", []byte(`{"token":"`+ph["BODY"]+`","k":"`+ph["API"]+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"token":"`+realBody+`","k":"`+ph["API"]+`"}` || !slices.Equal(in, []string{"BODY"}) || !slices.Equal(mis, []string{"API"}) {
		t.Fatalf("message %q, injected %q, misuse %q", out, in, mis)
	}
	found := false
	for _, p := range set.Redactions("body.example.com") {
		found = found || p.Secret == realBody && p.Replacement == ph["BODY"]
	}
	if !found {
		t.Error("the value sent in a message is not in Redactions")
	}
	// The API key allows a header only: its placeholder in a message to its own host stays.
	out, in, mis, err = set.ModifyMessage(ctx, "api.example.com", []byte("key "+ph["API"]))
	if err != nil || strings.Contains(string(out), realAPI) || len(in) != 0 || !slices.Equal(mis, []string{"API"}) {
		t.Fatalf("header-only credential in a message: %q %q %q %v", out, in, mis, err)
	}
	if out, in, mis, err = set.ModifyMessage(ctx, "body.example.com", []byte("nothing here")); err != nil || string(out) != "nothing here" || in != nil || mis != nil {
		t.Fatalf("a message without placeholders changed: %q %q %q %v", out, in, mis, err)
	}
}
