module github.com/cordon-sandbox/cordon

go 1.26.8

require (
	github.com/creack/pty v1.1.24
	github.com/google/go-cmp v0.6.0
	github.com/landlock-lsm/go-landlock v0.11.2
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
)

require kernel.org/pub/linux/libs/security/libcap/psx v1.2.78 // indirect
