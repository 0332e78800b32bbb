package scan

import (
	"path"
	"strings"
)

// fileClass is what a file's name says about how to judge it.
type fileClass struct {
	// definite is set when the name alone decides: the file is reported with this kind, unread.
	definite string
	// magic names a binary key-store format whose first bytes decide (magicPKCS12, magicJKS).
	magic int
	// dotenv: assignments are judged one by one (see matchDotenv). A dotenv template is judged by
	// the content rules only, like any file.
	dotenv bool
	// config lists keys whose literal value is a credential in this kind of file, and the kind
	// reported for one.
	config *configRule
	// json: the GCP credential rules apply.
	json bool
	// binary: the extension says the content is not text; only name rules and magic apply.
	binary bool
	// other: nothing in the name marks configuration, keys or environment (Options.ConfigOnly skips
	// reading these).
	other bool
}

const (
	magicNone = iota
	magicPKCS12
	magicJKS
)

// configRule names the keys that hold credentials in one kind of configuration file.
type configRule struct {
	kind string
	// keys are matched case-insensitively against the whole key; suffixes against its end (for
	// .npmrc's "//host/:_authToken").
	keys, suffixes []string
}

var (
	npmrcRule  = &configRule{kind: "npm auth token", suffixes: []string{"_authtoken", "_auth", "_password"}}
	yarnrcRule = &configRule{kind: "yarn registry token", keys: []string{"npmauthtoken", "npmauthident"}}
	pypircRule = &configRule{kind: "PyPI password", keys: []string{"password"}}
	dockerRule = &configRule{kind: "Docker registry auth", keys: []string{"auth", "identitytoken", "registrytoken"}}
	kubeRule   = &configRule{kind: "Kubernetes credentials", keys: []string{"client-key-data", "token", "password", "access-token", "refresh-token", "id-token"}}
	mycnfRule  = &configRule{kind: "MySQL password", keys: []string{"password"}}
	s3cfgRule  = &configRule{kind: "S3 secret key", keys: []string{"secret_key", "access_token"}}
)

// sshKeyNames are the file names ssh-keygen gives private keys.
var sshKeyNames = map[string]bool{
	"id_rsa": true, "id_dsa": true, "id_ecdsa": true, "id_ed25519": true, "id_ecdsa_sk": true,
	"id_ed25519_sk": true,
}

// definiteNames are file names kept only for secrets.
var definiteNames = map[string]string{
	".netrc":            "netrc file (machine passwords)",
	"_netrc":            "netrc file (machine passwords)",
	".pgpass":           "PostgreSQL password file",
	".git-credentials":  "git credentials file",
	".htpasswd":         "htpasswd file",
	"secring.gpg":       "GnuPG secret keyring",
	"terraform.tfstate": "Terraform state (holds secrets in plain text)",
}

// templateMarks are the words that make a dotenv file a template: .env.example, example.env.
var templateMarks = map[string]bool{
	"example": true, "examples": true, "sample": true, "samples": true, "template": true, "templates": true,
	"tmpl": true, "tpl": true, "dist": true, "default": true, "defaults": true, "schema": true, "skel": true,
}

// binaryExts are extensions whose content the text rules need not read.
var binaryExts = map[string]bool{
	".png": true, ".jpg": true, ".jpeg": true, ".gif": true, ".webp": true, ".ico": true, ".bmp": true,
	".tiff": true, ".svgz": true, ".psd": true, ".mp3": true, ".mp4": true, ".mov": true, ".avi": true,
	".webm": true, ".wav": true, ".ogg": true, ".flac": true, ".pdf": true, ".zip": true, ".gz": true,
	".tgz": true, ".bz2": true, ".xz": true, ".zst": true, ".7z": true, ".rar": true, ".tar": true,
	".jar": true, ".war": true, ".class": true, ".so": true, ".dylib": true, ".dll": true, ".exe": true,
	".o": true, ".a": true, ".lib": true, ".obj": true, ".pyc": true, ".pyo": true, ".wasm": true,
	".woff": true, ".woff2": true, ".ttf": true, ".otf": true, ".eot": true, ".sqlite": true,
	".db": true, ".parquet": true, ".npy": true, ".pt": true, ".onnx": true, ".bin": true,
}

// secretDirs are directory names whose files, reached by a symbolic link, are the user's credentials.
var secretDirs = map[string]bool{
	".ssh": true, ".aws": true, ".gnupg": true, ".kube": true, ".docker": true, ".azure": true,
	"gcloud": true, ".password-store": true, "private-keys-v1.d": true,
}

// classify judges a file by its slash-separated path relative to the root.
func classify(rel string) fileClass {
	base := path.Base(rel)
	parent := path.Base(path.Dir(rel))
	lower := strings.ToLower(base)
	ext := path.Ext(lower)
	switch {
	case sshKeyNames[base]:
		return fileClass{definite: "SSH private key"}
	case definiteNames[base] != "":
		return fileClass{definite: definiteNames[base]}
	case ext == ".kdbx" || ext == ".kdb":
		return fileClass{definite: "KeePass database"}
	case ext == ".keychain" || strings.HasSuffix(lower, ".keychain-db"):
		return fileClass{definite: "macOS keychain"}
	case ext == ".tfstate" || strings.HasSuffix(lower, ".tfstate.backup"):
		return fileClass{definite: "Terraform state (holds secrets in plain text)"}
	case parent == ".aws" && base == "credentials":
		return fileClass{definite: "AWS credentials file"}
	case parent == ".azure" && (strings.HasPrefix(base, "msal_token_cache.") || base == "accessTokens.json" ||
		strings.HasPrefix(base, "service_principal_entries.")):
		return fileClass{definite: "Azure CLI credentials"}
	case parent == "gcloud" && (base == "credentials.db" || base == "access_tokens.db" || base == "legacy_credentials"):
		return fileClass{definite: "gcloud credentials"}
	case parent == "private-keys-v1.d":
		return fileClass{definite: "GnuPG private key"}
	case ext == ".p12" || ext == ".pfx":
		return fileClass{magic: magicPKCS12, binary: true}
	case ext == ".jks" || ext == ".keystore":
		return fileClass{magic: magicJKS, binary: true}
	case base == ".npmrc":
		return fileClass{config: npmrcRule}
	case base == ".yarnrc.yml":
		return fileClass{config: yarnrcRule}
	case base == ".pypirc":
		return fileClass{config: pypircRule}
	case parent == ".docker" && base == "config.json":
		return fileClass{config: dockerRule, json: true}
	case parent == ".kube" && base == "config", strings.HasPrefix(lower, "kubeconfig"):
		return fileClass{config: kubeRule}
	case base == ".my.cnf":
		return fileClass{config: mycnfRule}
	case base == ".s3cfg":
		return fileClass{config: s3cfgRule}
	case rel == ".git/config" || strings.HasSuffix(rel, "/.git/config"):
		return fileClass{} // configuration: read even with Options.ConfigOnly, for remotes' credentials
	}
	if d, tmpl := dotenvName(lower); d {
		return fileClass{dotenv: !tmpl}
	}
	return fileClass{json: ext == ".json", binary: binaryExts[ext], other: !configExts[ext] && !strings.HasPrefix(base, ".")}
}

// configExts are the extensions of files that hold configuration or keys: what Options.ConfigOnly
// reads, with dotfiles and the names classify knows.
var configExts = map[string]bool{
	".pem": true, ".key": true, ".crt": true, ".cer": true, ".ppk": true, ".asc": true, ".json": true,
	".yaml": true, ".yml": true, ".toml": true, ".ini": true, ".cfg": true, ".conf": true, ".config": true,
	".properties": true, ".xml": true, ".tfvars": true, ".hcl": true, ".env": true, ".cnf": true,
}

// dotenvName reports whether a (lower-case) file name is a dotenv file, and whether it is a template:
// .env, .env.local, .env.production, prod.env, .envrc; .env.example, example.env, .env.local.sample.
func dotenvName(lower string) (dotenv, template bool) {
	var words []string
	switch {
	case lower == ".env" || lower == ".envrc":
		return true, false
	case strings.HasPrefix(lower, ".env."):
		words = strings.Split(lower[len(".env."):], ".")
	case strings.HasSuffix(lower, ".env") && len(lower) > len(".env"):
		words = strings.Split(strings.TrimPrefix(lower[:len(lower)-len(".env")], "."), ".")
	default:
		return false, false
	}
	for _, w := range words {
		if templateMarks[w] {
			return true, true
		}
	}
	return true, false
}

// symlinkKind says whether a link named rel with the given target names a secret-shaped file, and
// what kind; content cannot decide, as links are never followed.
func symlinkKind(rel, target string) string {
	for _, p := range []string{rel, strings.TrimLeft(path.Clean("/"+target), "/")} {
		c := classify(p)
		switch {
		case c.definite != "":
			return c.definite
		case c.magic != magicNone:
			return "key store"
		case c.dotenv:
			return "dotenv file"
		case c.config != nil:
			return c.config.kind
		case strings.HasSuffix(strings.ToLower(p), ".key"):
			return "private key"
		}
	}
	for _, dir := range strings.Split(path.Clean("/"+target), "/") {
		if secretDirs[dir] {
			return "path under " + dir
		}
	}
	return ""
}
