// Package intercept is the egress gateway's TLS interception engine: for the few hosts that need
// HTTP-level rules or credential injection, it terminates the sandbox's TLS with a per-run CA that only
// that sandbox trusts, checks every HTTP request, lets a hook rewrite it (credential injection), and
// forwards it to the real upstream over TLS verified against the host's trust store or a CA the policy
// names. Every other host passes through the gateway as opaque TLS; the caller asks Wants to choose.
//
// # Trust
//
// NewCA generates an ECDSA P-256 key in memory; it is never written anywhere, so a leaf can only be
// minted by this process, for this run. Leaves are minted on demand for intercepted names only, cached,
// and valid for a day. The sandbox gets CertPEM (the certificate, never the key).
//
// # What a request must be
//
// In order, each request on an intercepted connection is refused if:
//
//   - its Host (HTTP/1.1) or :authority (HTTP/2), and any Host field beside it, does not name the
//     connection's host (the SNI the caller checked), with the connection's port if it has one:
//     421 Misdirected Request. This is domain fronting, and it is refused whether or not rules exist.
//   - it is CONNECT (405), or its request-target is not origin-form, i.e. a path starting with "/"
//     (absolute-form "https://…", authority-form, "*"): 400. On plain HTTP (ServePlain) an
//     absolute-form "http://name[:port]/path", as clients send to an explicit proxy, is taken as its
//     path when it names the connection's host.
//   - it asks to upgrade to anything but a websocket (403): after a 101 the connection is a tunnel
//     the rules no longer see, and an upgrade to h2c would carry requests for any path.
//   - rules cover the host and it is a websocket handshake that is not well-formed (HTTP/1.1 GET,
//     Upgrade: websocket alone, a 16-byte Sec-WebSocket-Key, version 13): 400.
//   - rules cover the host and none allows it: 403, with a body naming the rules consulted, what they
//     allow, and the line that would allow this request. An Access allows a request only if it also
//     allows each extra the request asks for: a body on GET, HEAD, OPTIONS, DELETE or TRACE
//     (Access.Body), an upgrade (Access.Websocket), and method-override and URL-rewrite headers such as
//     X-HTTP-Method-Override and X-Original-URL (Access.Headers); the denial names the access and the
//     field to add.
//   - Modify returns an error: 403. Modify learns from r.URL.Scheme whether the request goes upstream
//     over verified TLS ("https") or in cleartext ("http"), and a credential must go only over TLS; a
//     hook that injects into a cleartext request anyway is refused with 502.
//
// An allowed request goes to the connection's name and port and nowhere else, whatever its URL (or
// Modify) says, over TLS verified for that name. Hop-by-hop and proxy headers (Proxy-Authorization,
// Forwarded, X-Forwarded-*) are dropped. HTTP/2 is served when the client offers it in ALPN; the
// upstream protocol follows the client's (HTTP/2 when the client spoke it and the upstream offers
// it, else HTTP/1.1). A websocket (HTTP/1.1 upgrade) is judged as its GET (on a host with rules, by
// an Access with Websocket), then relayed both ways until either side closes; what flows after the
// 101 is not inspected, and a 101 for another protocol than websocket is refused (502). Websockets over HTTP/2
// (extended CONNECT, RFC 8441) are refused like any CONNECT; clients fall back to HTTP/1.1.
//
// # Path globs
//
// A rule's Paths are matched against the request's path, never its query, after it has been decoded
// and proved canonical. A path is canonical when, as sent:
//
//   - every "%" starts a valid escape, and no escape encodes "/", "\", "%" or a control character
//     (so "%2f", "%5c" and double encoding such as "%252e" are refused);
//   - it has no backslash, space, control character, "#" or byte outside ASCII (encode them);
//   - decoded, it has no empty segment ("//"; a single trailing "/" is fine) and no "." or ".."
//     segment, also not with matrix parameters ("..;x"), and so path.Clean leaves it unchanged
//     (so "%2e%2e" is refused like "..");
//   - decoded, it is valid UTF-8 (so overlong forms such as "%c0%ae" for "." and "%c0%af" for "/"
//     are refused) and holds no character a normalising server reads as ".", "/", "\\" or "%"
//     (full-width "．" and "／", one dot leader, fraction and division slashes, and the like).
//
// A path that is not canonical is refused rather than guessed at, because the upstream might read it
// differently from the matcher. In a glob "*" matches any run of characters, "/" included, and every
// other character matches itself, case-sensitively; the glob must match the whole path. So
// "/acme/app.git/*" allows "/acme/app.git/info/refs" and "/acme/app.git/git-receive-pack" but not
// "/acme/app.git" itself, nor "/acme/other.git/…". Methods are compared exactly, in upper case.
//
// A host that several rules name is allowed what any of them allows. A host that rules name but whose
// rules allow nothing is refused everything; a host intercepted only through Config.Hosts has no
// request rules.
//
// # Audit
//
// Each request is one audit.Event of Kind audit.KindHTTP with the method, the path (without the
// query, which may carry secrets), the status, bytes each way and duration, and whatever details
// Modify returns. Header values are never recorded.
package intercept
