package aioqueue

import (
	"fmt"
	"strconv"
	"strings"
)

const priorityLevels = 10

// queueKeys names a queue's keys: "<prefix>:{<queue>}:<role>" (docs/protocol.md, Keys).
// The braces are a Redis Cluster hash tag: every key of a queue is in one slot.
type queueKeys struct {
	name, base string
}

func newQueueKeys(prefix, queue string) (queueKeys, error) {
	if queue == "" || len(queue) > 200 || strings.ContainsAny(queue, "{}: \t\r\n") {
		return queueKeys{}, invalid("queue name %q: use 1-200 characters without braces, colons or spaces", queue)
	}
	if prefix == "" || strings.ContainsAny(prefix, "{} \t\r\n") {
		return queueKeys{}, invalid("key prefix %q", prefix)
	}
	return queueKeys{queue, fmt.Sprintf("%s:{%s}", prefix, queue)}, nil
}

func (k queueKeys) key(role string) string { return k.base + ":" + role }
func (k queueKeys) job(id string) string   { return k.base + ":job:" + id }
func (k queueKeys) ready(p int) string     { return k.base + ":ready:" + strconv.Itoa(p) }
func (k queueKeys) settled() string        { return k.key("settled") }

func (k queueKeys) done(spanMs, generation int64, slot int) string {
	return fmt.Sprintf("%s:donefp:%d:%d:%d", k.base, spanMs, generation, slot)
}

// links: the keys of include/links.lua, in the order scripts declare them.
func (k queueKeys) links() []any {
	return []any{k.key("groups"), k.key("group:"), k.key("inputs:"), k.key("handoff"), k.key("waiting")}
}
