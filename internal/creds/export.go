package creds

// Exported is one prepared credential as it crosses to a gateway that runs elsewhere (the Kubernetes
// backend's pod): what the sandbox was given in its place and the value the gateway puts there. It
// holds a real value: it goes into a Secret, never into a log or a rendering.
type Exported struct {
	Name        string `json:"name"`
	Inject      Inject `json:"inject"`
	Shape       string `json:"shape,omitempty"`
	Placeholder string `json:"placeholder"`
	Value       string `json:"value"`
}
