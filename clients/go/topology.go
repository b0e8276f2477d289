package aioqueue

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/mna/redisc"
)

// backend is where calls go: one server (a pool), or a Redis Cluster (redisc), where
// every call of a queue goes to the node of its slot (all its keys share a hash tag).
type backend interface {
	// get: a connection for commands on the keys of slotKey's slot.
	get(ctx context.Context, slotKey string) (redis.Conn, error)
	// subscriber: a connection of its own for pub/sub on channel's slot.
	subscriber(channel string) (redis.Conn, error)
	// cluster: calls follow MOVED/ASK one command at a time (no pipelining), pub/sub is
	// sharded (SSUBSCRIBE) and scripts that publish are sent in their sharded build.
	cluster() bool
	close() error
}

func newBackend(rawURL string, cfg Config) (backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil || rawURL == "" {
		return nil, invalid("redis URL %q", maskURL(rawURL))
	}
	options := []redis.DialOption{
		redis.DialConnectTimeout(cfg.ConnectTimeout),
		redis.DialReadTimeout(cfg.SocketTimeout),
		redis.DialWriteTimeout(cfg.SocketTimeout),
	}
	switch u.Scheme {
	case "redis", "rediss":
		s := &server{url: rawURL, options: options}
		s.pool = &redis.Pool{MaxIdle: cfg.MaxIdle, IdleTimeout: 4 * time.Minute,
			DialContext: func(context.Context) (redis.Conn, error) { return s.dial() }}
		return s, nil
	case "redis+cluster", "rediss+cluster":
		return newCluster(u, cfg, options)
	}
	return nil, invalid("redis URL %q: use redis://, rediss://, redis+cluster:// or rediss+cluster://", maskURL(rawURL))
}

type server struct {
	url     string
	options []redis.DialOption
	pool    *redis.Pool
}

func (s *server) dial() (redis.Conn, error) {
	return redis.DialURL(s.url, s.options...)
}

func (s *server) get(ctx context.Context, _ string) (redis.Conn, error) {
	return s.pool.GetContext(ctx)
}
func (s *server) subscriber(string) (redis.Conn, error) { return s.dial() }
func (s *server) cluster() bool                         { return false }
func (s *server) close() error                          { return s.pool.Close() }

type cluster struct {
	nodes   *redisc.Cluster
	attempt int
}

// newCluster: redis+cluster://[user:password@]host:port[,host:port...] (the Python App's
// form); rediss+cluster:// for TLS.
func newCluster(u *url.URL, cfg Config, options []redis.DialOption) (backend, error) {
	var nodes []string
	for _, node := range strings.Split(u.Host, ",") {
		if node == "" || !strings.Contains(node, ":") {
			return nil, invalid("cluster URL: node %q is not host:port", node)
		}
		nodes = append(nodes, node)
	}
	if u.User != nil {
		if password, ok := u.User.Password(); ok {
			options = append(options, redis.DialPassword(password))
			if name := u.User.Username(); name != "" {
				options = append(options, redis.DialUsername(name))
			}
		} else {
			options = append(options, redis.DialPassword(u.User.Username()))
		}
	}
	if u.Scheme == "rediss+cluster" {
		options = append(options, redis.DialUseTLS(true))
	}
	nodes2 := &redisc.Cluster{
		StartupNodes: nodes,
		DialOptions:  options,
		CreatePool: func(address string, options ...redis.DialOption) (*redis.Pool, error) {
			return &redis.Pool{MaxIdle: cfg.MaxIdle, IdleTimeout: 4 * time.Minute,
				Dial: func() (redis.Conn, error) { return redis.Dial("tcp", address, options...) }}, nil
		},
	}
	return &cluster{nodes: nodes2, attempt: 5}, nil
}

func (c *cluster) get(ctx context.Context, slotKey string) (redis.Conn, error) {
	conn := c.nodes.Get()
	if err := redisc.BindConn(conn, slotKey); err != nil {
		conn.Close()
		return nil, err
	}
	// follows MOVED and ASK, and waits out TRYAGAIN (a slot being migrated)
	return redisc.RetryConn(conn, c.attempt, 50*time.Millisecond)
}

func (c *cluster) subscriber(channel string) (redis.Conn, error) {
	conn, err := c.nodes.Dial()
	if err == nil {
		if err = redisc.BindConn(conn, channel); err != nil {
			conn.Close()
		}
	}
	return conn, err
}

func (c *cluster) cluster() bool { return true }
func (c *cluster) close() error  { return c.nodes.Close() }
