// Package scan finds secret-shaped files in a workspace, and secret-shaped values in the variables a
// policy passes into the sandbox, before cordon starts an agent. Its findings let cordon mask those files
// in the sandbox's view of the workspace, so that a production connection string or a private key never
// reaches the agent by accident; the user allows a file deliberately, by glob, in the policy.
//
// Masking a real project file breaks the agent's work, so every rule aims to be precise rather than
// broad. The decisions, in one place:
//
// Files flagged by name alone (nothing else is kept under these names): SSH private keys (id_rsa,
// id_ed25519, ...), .netrc/_netrc, .pgpass, .git-credentials, .htpasswd, KeePass databases (*.kdbx),
// macOS keychains, Terraform state (*.tfstate, *.tfstate.backup: it holds resource secrets in plain
// text), .aws/credentials, the Azure CLI's token caches, gcloud's credential databases, GnuPG private
// keys and secret keyrings.
//
// Files flagged by name and content: PKCS#12 (*.p12, *.pfx) and Java key stores (*.jks, *.keystore)
// whose first bytes have the format's structure; .npmrc, .yarnrc.yml, .pypirc, .docker/config.json,
// kube configs, .my.cnf and .s3cfg holding a literal (not ${VAR}) token or password; *.pem, *.key and
// everything else through the content rules below.
//
// Dotenv files (.env, .env.*, *.env, .envrc) are flagged when one assignment holds a secret: a
// non-placeholder value under a secret-named key (API_KEY, DB_PASSWORD, ...), a value a content rule
// matches, or a long high-entropy value. A .env holding only PORT=3000 is left alone. Templates
// (.env.example, .env.sample, .env.template, .env.tmpl, .env.dist, .env.defaults, example.env, ...)
// are not flagged by name: they are scanned like any other file, so a real key pasted into one is
// still found.
//
// Content rules (the first MaxRead bytes of each non-binary file): tokens by their documented prefixes
// (GitHub, GitLab, Slack, Anthropic, OpenAI, AWS access key IDs and secret keys, Google API keys,
// Stripe live keys), PEM and PuTTY private keys followed by key material (a lone header in code that
// generates keys is not a key), GCP service-account and gcloud user credentials in JSON, and
// connection strings with a literal password for a host other than loopback: user:pass@host after any
// scheme (database URLs, JDBC URLs, a git remote's token), and a password parameter of a database or
// JDBC URL (?password=, ;password=). Only loopback (localhost, *.localhost, 127/8, ::1, the
// unspecified address) and the sandbox's own services (*.cordon.internal) are exempt: a private
// address, a bare docker-compose name, *.local, host.docker.internal and a documentation domain
// (prod.example.com in a real .env is a real host renamed) may all be production. Of a URL's
// password only a plain template is exempt (empty, $VAR, ${VAR}, <password>, {{ .X }}, %(x)s, %s,
// ***): a short or guessable password ("p", "password", "changeme") is still a password.
//
// Not flagged: values outside URLs that are placeholders (empty, ${VAR}, <...>, xxxx, changeme, ...), tokens that
// are documentation examples (containing EXAMPLE, like AKIAIOSFODNN7EXAMPLE, or made of few distinct
// characters), and JWTs: they are usually short-lived and common in test fixtures.
//
// Not scanned: .git internals (except .git/config), node_modules, Python caches, .hg, .svn,
// .terraform, and directories recognised by their content: Go and Composer vendor trees (a vendor
// directory holding modules.txt or autoload.php), Python virtualenvs under any name (pyvenv.cfg: one
// named .env is common), and cache directories tagged with CACHEDIR.TAG (Cargo's target): third-party
// or generated files that are large and rarely hold the user's secrets. Binary files
// (a NUL byte in the first 8 KiB, or a known binary extension) get only the name rules.
//
// Symbolic links are never followed. A link whose target lies outside the workspace is reported when
// the link's name or its target names a secret-shaped file (~/.ssh/id_rsa, ~/.aws/credentials, ...):
// the sandbox cannot follow it out today, but a later mount of the target would, and the name alone
// says the user did not mean to share it. A link to a file inside the workspace is covered by the
// scan of that file.
//
// Speed: cordon's start waits for the scan, so it reads only the first MaxRead bytes of each file,
// skips by name before opening anything, walks with a pool of workers, and jumps between a few anchor
// bytes with a vectorised search instead of looking at every byte. Two options trade coverage or state
// for more: Options.Cache (kept in cordon's state) records each directory, so that a later scan stats
// the directories and the candidate files (names marking configuration, keys or environment) and reads
// only what is new, in a changed directory, or a changed candidate: O(directories), whatever the
// number of files (see Cache for what it gives up); Options.ConfigOnly reads only candidates.
//
// A finding never carries the secret: at most a redacted preview (the token's public prefix, a URL's
// user and host) for the user to recognise it.
package scan
