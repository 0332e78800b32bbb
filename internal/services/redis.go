package services

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// redisConfig is a Redis server on a unix socket only, keeping nothing on disk, behind a password.
// The commands that reach past the fixture (MODULE, DEBUG, changing protected settings such as dir)
// stay off, as Redis ships them.
func redisConfig(dir, sock, password string) string {
	return fmt.Sprintf(`port 0
unixsocket %s
unixsocketperm 700
dir %s
daemonize no
save ""
appendonly no
protected-mode yes
requirepass %s
enable-protected-configs no
enable-debug-command no
enable-module-command no
`, sock, dir, password)
}

func startRedis(ctx context.Context, opts Options, sp Spec, runDir string) (*Server, error) {
	bins, err := Find("redis", opts.Path)
	if err != nil {
		return nil, err
	}
	if err := checkFixtures(opts, sp.Fixtures); err != nil {
		return nil, err
	}
	dir, sock, err := serviceDir(opts, runDir, sp.Name, "redis.sock")
	if err != nil {
		return nil, err
	}
	password, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "redis.conf")
	if err := writePrivate(opts.IDs, conf, []byte(redisConfig(dir, sock, password))); err != nil {
		return nil, err
	}
	p, err := spawn(opts.IDs, filepath.Join(runDir, sp.Name+".log"), syscall.SIGTERM, nil, bins.Path("redis-server"), conf)
	if err != nil {
		return nil, err
	}
	srv := &Server{Name: sp.Name, Kind: sp.Kind, Version: bins.Version, Socket: sock, Port: 6379, proc: p}
	var c *redisConn
	err = p.waitReady(ctx, func() bool {
		c, err = dialRedis(sock, password)
		return err == nil
	})
	if err != nil {
		return srv, err
	}
	defer c.Close()
	for _, f := range sp.Fixtures {
		t0 := time.Now()
		if err := applyRedis(c, opts.Project, f); err != nil {
			return srv, err
		}
		if opts.Event != nil {
			opts.Event(Event{Service: sp.Name, Kind: sp.Kind, Action: "fixture", Detail: f, Duration: time.Since(t0)})
		}
	}
	srv.URL = fmt.Sprintf("redis://default:%s@%s.cordon.internal:6379", password, sp.Name)
	srv.HostHint = fmt.Sprintf("redis-cli -s %s --pass %s", sock, password)
	return srv, nil
}

// applyRedis sends a fixture's commands, one a line ("SET key value", words split as redis-cli
// splits them, blank lines and # comments skipped), stopping at the first the server refuses.
func applyRedis(c *redisConn, project, rel string) error {
	f, err := openFixture(project, rel)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		args, err := SplitCommand(text)
		if err != nil {
			return &FixtureError{File: rel, Message: fmt.Sprintf("%s:%d: %v", rel, line, err)}
		}
		if err := c.do(args...); err != nil {
			return &FixtureError{File: rel, Message: fmt.Sprintf("%s:%d: %v", rel, line, err)}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("fixture %s: %w", rel, err)
	}
	return nil
}

// SplitCommand splits a line of a Redis fixture into words the way redis-cli does: spaces separate,
// "double quotes" take \n, \t, \", \\ and \xHH escapes, 'single quotes' only \'. An unterminated
// quote is an error.
func SplitCommand(line string) ([]string, error) {
	var args []string
	i := 0
	for {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i == len(line) {
			return args, nil
		}
		var b strings.Builder
		switch line[i] {
		case '"':
			i++
			for {
				if i >= len(line) {
					return nil, errors.New("unterminated double quote")
				}
				c := line[i]
				if c == '"' {
					i++
					break
				}
				if c == '\\' && i+1 < len(line) {
					i++
					switch e := line[i]; e {
					case 'n':
						b.WriteByte('\n')
					case 't':
						b.WriteByte('\t')
					case 'r':
						b.WriteByte('\r')
					case 'x':
						if i+2 < len(line) {
							if v, err := strconv.ParseUint(line[i+1:i+3], 16, 8); err == nil {
								b.WriteByte(byte(v))
								i += 2
								break
							}
						}
						b.WriteByte('x')
					default:
						b.WriteByte(e)
					}
					i++
					continue
				}
				b.WriteByte(c)
				i++
			}
		case '\'':
			i++
			for {
				if i >= len(line) {
					return nil, errors.New("unterminated single quote")
				}
				c := line[i]
				if c == '\'' {
					i++
					break
				}
				if c == '\\' && i+1 < len(line) && line[i+1] == '\'' {
					i++
					c = '\''
				}
				b.WriteByte(c)
				i++
			}
		default:
			for i < len(line) && line[i] != ' ' && line[i] != '\t' {
				b.WriteByte(line[i])
				i++
			}
			args = append(args, b.String())
			continue
		}
		if i < len(line) && line[i] != ' ' && line[i] != '\t' {
			return nil, errors.New("a closing quote must be followed by a space")
		}
		args = append(args, b.String())
	}
}

// redisConn is the least of RESP2 that seeding needs: send a command, read one reply, fail on an
// error reply.
type redisConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRedis(sock, password string) (*redisConn, error) {
	nc, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &redisConn{Conn: nc, r: bufio.NewReader(nc)}
	if err := c.do("AUTH", password); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.do("PING"); err != nil { // LOADING until the server is ready
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *redisConn) do(args ...string) error {
	if len(args) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, b.String()); err != nil {
		return err
	}
	return c.reply()
}

// reply reads one reply, nested arrays included, returning the first error reply it holds.
func (c *redisConn) reply() error {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return nil
	case '-':
		return errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return fmt.Errorf("bad reply %q", line)
		}
		if n < 0 {
			return nil
		}
		_, err = c.r.Discard(n + 2)
		return err
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return fmt.Errorf("bad reply %q", line)
		}
		var first error
		for range max(n, 0) {
			if err := c.reply(); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	return fmt.Errorf("bad reply %q", line)
}
