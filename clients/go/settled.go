package aioqueue

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Hearing that jobs finished, so Job.Result returns at once without polling. The
// scripts that finish jobs announce their ids on the queue's settled channel, one message
// per call: netstrings "<length>:<id>" back to back. A listener per channel (per queue
// waited on) holds one subscribed connection and wakes the waiters of each id it hears; a
// waiter then reads the record itself. Pub/sub is at most once: after a reconnect every
// waiter is woken to look again, and waiters look every PollInterval in any case.

const (
	confirmWithin = 2 * time.Second        // a waiter waits this long for its subscription
	pingAfter     = time.Second            // quiet this long: PING
	silenceLimit  = 3 * time.Second        // nothing at all this long: the connection is dead
	retryPause    = 500 * time.Millisecond // after a failed connection
)

type listener struct {
	client    *Client
	channel   string
	mu        sync.Mutex
	waiters   map[string]map[chan struct{}]struct{}
	confirmed chan struct{} // closed once the current connection's SUBSCRIBE is confirmed
	conn      redis.Conn
	closing   bool
}

func (c *Client) listener(channel string) *listener {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.listeners[channel]
	if !ok {
		l = &listener{client: c, channel: channel, waiters: map[string]map[chan struct{}]struct{}{},
			confirmed: make(chan struct{}), closing: c.closed}
		c.listeners[channel] = l
		if !c.closed {
			go l.run()
		}
	}
	return l
}

// wait registers a waiter for id and returns once the subscription is confirmed (or
// confirmWithin has passed: Redis is away, and the waiter's periodic look is all there
// is), so an announcement made after the caller reads the job's status is not missed.
func (l *listener) wait(ctx context.Context, id string) (<-chan struct{}, func()) {
	wake := make(chan struct{}, 1)
	l.mu.Lock()
	if l.waiters[id] == nil {
		l.waiters[id] = map[chan struct{}]struct{}{}
	}
	l.waiters[id][wake] = struct{}{}
	confirmed := l.confirmed
	l.mu.Unlock()
	timer := time.NewTimer(confirmWithin)
	select {
	case <-confirmed:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	return wake, func() {
		l.mu.Lock()
		delete(l.waiters[id], wake)
		if len(l.waiters[id]) == 0 {
			delete(l.waiters, id)
		}
		l.mu.Unlock()
	}
}

func (l *listener) run() {
	for {
		err := l.listen()
		l.mu.Lock()
		l.conn = nil
		l.confirmed = make(chan struct{})
		closing := l.closing
		l.mu.Unlock()
		l.wakeAll() // announcements may have been missed meanwhile
		if closing {
			return
		}
		if err != nil {
			time.Sleep(retryPause)
		}
	}
}

func (l *listener) listen() error {
	conn, err := l.client.backend.subscriber(l.channel)
	if err != nil {
		return err
	}
	defer conn.Close()
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return nil
	}
	l.conn = conn
	l.mu.Unlock()
	subscribe := "SUBSCRIBE"
	if l.client.backend.cluster() { // sharded pub/sub: the scripts' cluster build SPUBLISHes
		subscribe = "SSUBSCRIBE"
	}
	if err := send(conn, subscribe, l.channel); err != nil {
		return err
	}
	quiet := time.Duration(0)
	for {
		reply, err := redis.ReceiveWithTimeout(conn, pingAfter)
		if err != nil {
			var netErr net.Error
			if !errors.As(err, &netErr) || !netErr.Timeout() {
				return err
			}
			if quiet += pingAfter; quiet >= silenceLimit {
				return err
			}
			if err := send(conn, "PING"); err != nil {
				return err
			}
			continue
		}
		quiet = 0
		l.handle(reply)
	}
}

func send(conn redis.Conn, command string, args ...any) error {
	if err := conn.Send(command, args...); err != nil {
		return err
	}
	return conn.Flush()
}

// handle one pushed reply: [kind, channel, data] ("message", "smessage"), a subscription
// confirmed ("subscribe", "ssubscribe"), or the answer to a PING.
func (l *listener) handle(reply any) {
	parts, err := redis.Values(reply, nil)
	if err != nil || len(parts) < 2 {
		return
	}
	kind, _ := redis.String(parts[0], nil)
	switch kind {
	case "message", "smessage":
		if len(parts) == 3 {
			data, _ := redis.Bytes(parts[2], nil)
			l.heard(data)
		}
	case "subscribe", "ssubscribe":
		l.mu.Lock()
		select {
		case <-l.confirmed:
		default:
			close(l.confirmed)
		}
		l.mu.Unlock()
	}
}

func (l *listener) heard(data []byte) {
	ids, ok := parseIDs(data)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		for wake := range l.waiters[id] {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}

func (l *listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, waiters := range l.waiters {
		for wake := range waiters {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}

func (l *listener) close() {
	l.mu.Lock()
	l.closing = true
	conn := l.conn
	l.mu.Unlock()
	if conn != nil {
		conn.Close() // ends the blocked receive
	}
}

// parseIDs reads a settled message: netstrings "<length>:<id>", back to back.
func parseIDs(message []byte) ([]string, bool) {
	var ids []string
	for at := 0; at < len(message); {
		colon := at
		for colon < len(message) && message[colon] != ':' {
			colon++
		}
		length, err := strconv.Atoi(string(message[at:colon]))
		end := colon + 1 + length
		if err != nil || colon == len(message) || length < 0 || end > len(message) {
			return nil, false
		}
		ids = append(ids, string(message[colon+1:end]))
		at = end
	}
	return ids, true
}
