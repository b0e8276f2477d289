// Package aioqueue enqueues jobs for aioqueue's Python workers from Go, over the wire
// protocol of docs/protocol.md: the same Lua scripts the Python producer calls, so a job
// from Go is one a Python worker runs like any other.
//
//	client, err := aioqueue.NewClient("redis://localhost:6379/0", aioqueue.Config{})
//	queue, err := client.Queue("emails")
//	job, err := queue.Enqueue(ctx, "send_welcome", aioqueue.Args("ada@example.com"),
//		aioqueue.WithDelay(time.Minute))
//	var sent bool
//	err = job.Result(ctx, &sent)
package aioqueue

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Config tunes a Client. Zero values take the defaults, which are the Python App's: the
// settings a producer shares with the workers (Prefix, ResultTTL, IdempotencyTTL) must be
// the same on both sides.
type Config struct {
	Prefix          string        // key prefix; default "aioqueue"
	MaxPayloadBytes int           // largest encoded job; default 1 MiB
	ResultTTL       time.Duration // how long finished records are kept; default 24h
	IdempotencyTTL  time.Duration // how long a completed job with no result is remembered; default ResultTTL
	SocketTimeout   time.Duration // the longest one Redis command may take; default 5s
	ConnectTimeout  time.Duration // default 5s
	MaxIdle         int           // idle connections kept; default 8
	PollInterval    time.Duration // Job.Result's look in case an announcement was lost; default 5s
}

// Client talks to one Redis server or a Redis Cluster; safe for concurrent use. Close it
// when done.
type Client struct {
	cfg       Config
	url       string
	backend   backend
	mu        sync.Mutex
	listeners map[string]*listener // settled channel -> its listener
	closed    bool
}

// NewClient makes a client for the Redis at url: redis:// or rediss:// (with user,
// password and database) for one server, redis+cluster://host:port[,host:port...] (or
// rediss+cluster://) for a Redis Cluster. It connects on first use.
func NewClient(rawURL string, cfg Config) (*Client, error) {
	cfg = withDefaults(cfg)
	if cfg.MaxPayloadBytes <= 0 || cfg.ResultTTL < 0 || cfg.IdempotencyTTL < 0 {
		return nil, invalid("MaxPayloadBytes must be positive and TTLs not negative")
	}
	if _, err := newQueueKeys(cfg.Prefix, "q"); err != nil {
		return nil, err
	}
	backend, err := newBackend(rawURL, cfg)
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, url: rawURL, backend: backend, listeners: map[string]*listener{}}, nil
}

func withDefaults(cfg Config) Config {
	if cfg.Prefix == "" {
		cfg.Prefix = "aioqueue"
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = 1 << 20
	}
	if cfg.ResultTTL == 0 {
		cfg.ResultTTL = 24 * time.Hour
	}
	if cfg.IdempotencyTTL == 0 {
		cfg.IdempotencyTTL = cfg.ResultTTL
	}
	if cfg.SocketTimeout == 0 {
		cfg.SocketTimeout = 5 * time.Second
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.MaxIdle == 0 {
		cfg.MaxIdle = 8
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 5 * time.Second
	}
	return cfg
}

// Queue is a handle on one named queue (names as in Python: 1-200 characters without
// braces, colons or spaces).
func (c *Client) Queue(name string) (*Queue, error) {
	keys, err := newQueueKeys(c.cfg.Prefix, name)
	if err != nil {
		return nil, err
	}
	return &Queue{client: c, keys: keys}, nil
}

// Close releases the client's connections and ends every wait on a result.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	listeners := c.listeners
	c.listeners = map[string]*listener{}
	c.mu.Unlock()
	for _, l := range listeners {
		l.close()
	}
	return c.backend.close()
}

// call is one connection borrowed for the length of a context: each command is bounded
// by the context's deadline and the client's SocketTimeout (on a Cluster, where calls
// follow redirections, by SocketTimeout alone; the context is checked between commands).
type call struct {
	ctx       context.Context
	conn      redis.Conn
	timeout   time.Duration
	pipelined bool // one server: commands may be pipelined (Send, Flush, Receive)
}

func (c *Client) borrow(ctx context.Context, slotKey string) (*call, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	conn, err := c.backend.get(ctx, slotKey)
	if err != nil {
		return nil, err
	}
	return &call{ctx, conn, c.cfg.SocketTimeout, !c.backend.cluster()}, nil
}

func (k *call) do(command string, args ...any) (any, error) {
	if err := k.ctx.Err(); err != nil {
		return nil, err
	}
	timeout := k.timeout
	if deadline, ok := k.ctx.Deadline(); ok && time.Until(deadline) < timeout {
		timeout = time.Until(deadline)
		if timeout <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	var reply any
	var err error
	if k.pipelined {
		reply, err = redis.DoWithTimeout(k.conn, timeout, command, args...)
	} else {
		reply, err = k.conn.Do(command, args...)
	}
	if err != nil && k.ctx.Err() != nil {
		return nil, k.ctx.Err()
	}
	return reply, err
}

func (k *call) close() { k.conn.Close() }

// withConn runs fn on a borrowed connection; a connection failure (not a Redis error
// reply, not the context) is tried once more on a fresh connection, told it is a retry.
// A failure to connect at all is ErrServerUnavailable (nothing was sent); any other
// connection failure is returned as it is, for the caller to say what may have happened.
func (c *Client) withConn(ctx context.Context, slotKey string, fn func(k *call, retry bool) error) error {
	var err error
	sent := false
	for attempt := 0; attempt < 2; attempt++ {
		var k *call
		if k, err = c.borrow(ctx, slotKey); err == nil {
			err = fn(k, sent)
			sent = sent || err != nil
			k.close()
		}
		if err == nil || !isConnectionError(err) || ctx.Err() != nil {
			break
		}
	}
	switch {
	case err == nil || !(isConnectionError(err) || ctx.Err() != nil):
		return err
	case sent: // (a context that ended while a reply was awaited counts: it may have run)
		return &connectionLost{url: maskURL(c.url), err: err}
	case ctx.Err() != nil:
		return err
	}
	return fmt.Errorf("aioqueue: %w: %s: %v", ErrServerUnavailable, maskURL(c.url), err)
}

// connectionLost: the connection failed after a call was sent (it may have run).
type connectionLost struct {
	url string
	err error
}

func (e *connectionLost) Error() string {
	return fmt.Sprintf("aioqueue: connection to %s lost: %v", e.url, e.err)
}
func (e *connectionLost) Unwrap() error { return e.err }

// Is makes errors.Is(err, ErrServerUnavailable) true.
func (e *connectionLost) Is(target error) bool { return target == ErrServerUnavailable }

func isConnectionError(err error) bool {
	var lost *connectionLost
	if errors.As(err, &lost) {
		return true
	}
	var reply redis.Error
	if errors.As(err, &reply) || errors.Is(err, ErrInvalidOption) {
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, net.ErrClosed) || isIOError(err)
}

func isIOError(err error) bool {
	text := err.Error()
	for _, sign := range []string{"EOF", "connection reset", "broken pipe", "connect", "closed"} {
		if strings.Contains(text, sign) {
			return true
		}
	}
	return false
}

// maskURL hides a URL's password.
func maskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "***")
	}
	return u.String()
}
