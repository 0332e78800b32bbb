package policy

import (
	"reflect"
	"strings"
	"testing"
)

// TestParseRequestExtras: an HTTP rule's body, websocket and headers fields and a credential's
// ranges field parse, render back, and are refused with a located message when wrong.
func TestParseRequestExtras(t *testing.T) {
	const src = `version: 1
network:
  allow: [a.com]
  http:
    - host: a.com
      allow:
        - {methods: [GET], paths: [/search], body: true}
        - {methods: [GET], paths: [/ws], websocket: true}
        - {methods: [POST], paths: [/api/*], headers: [X-HTTP-Method-Override, x_original_url]}
credentials:
  - {name: T, from: {env: T}, inject: {host: a.com, header: x-key, ranges: true}}
`
	p, err := Parse("p.yaml", []byte(src), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := []HTTPAllow{
		{Methods: []string{"GET"}, Paths: []string{"/search"}, Body: true},
		{Methods: []string{"GET"}, Paths: []string{"/ws"}, Websocket: true},
		{Methods: []string{"POST"}, Paths: []string{"/api/*"}, Headers: []string{"X-HTTP-Method-Override", "x_original_url"}},
	}
	if got := p.Network.HTTP[0].Allow; !reflect.DeepEqual(got, want) {
		t.Errorf("allow = %+v, want %+v", got, want)
	}
	if !p.Credentials[0].Inject.Ranges {
		t.Errorf("ranges not set")
	}
	out, err := p.Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"body: true", "websocket: true", "headers: [X-HTTP-Method-Override, x_original_url]", "ranges: true"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("rendered policy lacks %q:\n%s", s, out)
		}
	}
	back, err := Parse("p.yaml", out, testOpts)
	if err != nil || !reflect.DeepEqual(back.Network.HTTP, p.Network.HTTP) || !reflect.DeepEqual(back.Credentials[0].Inject, p.Credentials[0].Inject) {
		t.Errorf("the rendered policy does not parse back to the same rules: %v", err)
	}

	for _, tt := range []struct{ name, src, want string }{
		{"body not bool", "version: 1\nnetwork:\n  http: [{host: a.com, allow: [{methods: [GET], paths: [/], body: yes please}]}]\n", "3:67: network.http[0].allow[0].body: expected true or false"},
		{"websocket not bool", "version: 1\nnetwork:\n  http: [{host: a.com, allow: [{methods: [GET], paths: [/], websocket: 1}]}]\n", "3:72: network.http[0].allow[0].websocket: expected true or false"},
		{"header not a name", "version: 1\nnetwork:\n  http: [{host: a.com, allow: [{methods: [GET], paths: [/], headers: [\"a b\"]}]}]\n", `3:71: network.http[0].allow[0].headers[0]: "a b" is not a valid HTTP header name`},
		{"header not an override", "version: 1\nnetwork:\n  http: [{host: a.com, allow: [{methods: [GET], paths: [/], headers: [X-Api-Key]}]}]\n", `3:71: network.http[0].allow[0].headers[0]: "X-Api-Key" is not a method-override or URL-rewrite header`},
		{"ranges not bool", "version: 1\nnetwork: {allow: [a.com]}\ncredentials:\n  - {name: T, from: {env: T}, inject: {host: a.com, body: true, ranges: some}}\n", "4:73: credentials[0].inject.ranges: expected true or false"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tt.src), testOpts)
			if err == nil || !strings.HasPrefix(strings.TrimPrefix(err.Error(), "p.yaml:"), tt.want) {
				t.Errorf("error %v, want it to start with %q", err, tt.want)
			}
		})
	}
}
