// Package credfiles lists where common tools keep long-lived credentials in a user's home: the files
// the sandbox must not show, so that the escape probes try to read them and cordon run warns when a
// policy path would expose one. One list, so the two cannot drift apart.
package credfiles

// File is a credential file (or a directory of them), relative to a home directory.
type File struct {
	// Rel is the path relative to the home directory.
	Rel string
	// What says what it holds, for a human.
	What string
	// Instead says how the agent can use the credential without the file.
	Instead string
}

// Home returns the list, in a fixed order. It is a function so that no caller can change it.
func Home() []File {
	return []File{
		{".ssh/id_rsa", "an SSH private key", "git over HTTPS with a credential"},
		{".ssh/id_ed25519", "an SSH private key", "git over HTTPS with a credential"},
		{".ssh/id_ecdsa", "an SSH private key", "git over HTTPS with a credential"},
		{".aws/credentials", "AWS keys", "an aws credential"},
		{".aws/sso/cache", "AWS SSO tokens", "an aws credential"},
		{".claude/.credentials.json", "Claude Code's login token", "a CLAUDE_CODE_OAUTH_TOKEN credential"},
		{".config/gh/hosts.yml", "the GitHub CLI's token", "a githubApp or env credential for GH_TOKEN"},
		{".git-credentials", "git's stored passwords", "a credential with scheme: basic"},
		{".netrc", "machine passwords", "a credential for the host"},
		{".npmrc", "npm registry tokens", "a credential for the registry"},
		{".pypirc", "PyPI passwords", "a credential for the index"},
		{".docker/config.json", "Docker registry logins", "a credential for the registry"},
		{".kube/config", "Kubernetes credentials", "a credential for the API server"},
		{".config/gcloud/application_default_credentials.json", "Google Cloud credentials", "a credential for the API"},
		{".config/gcloud/credentials.db", "Google Cloud credentials", "a credential for the API"},
		{".azure/msal_token_cache.json", "Azure CLI tokens", "a credential for the API"},
		{".gnupg/private-keys-v1.d", "GnuPG private keys", "nothing: keep signing outside"},
	}
}
