package aioqueue

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
)

// lua holds the assembled producer scripts, copied from aioqueue/store/lua by
// clients/sync_lua.py (a test fails when a copy drifts): the very source the Python
// producer sends, so the same SHA1.
//
//go:embed lua/*.lua
var lua embed.FS

type script struct {
	source string
	sha    string
	layout layout
}

func loadScript(name string) script {
	raw, err := lua.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("aioqueue: missing embedded script " + name)
	}
	sum := sha1.Sum(raw)
	return script{string(raw), hex.EncodeToString(sum[:]), parseLayout(string(raw))}
}

var (
	enqueueScript       = loadScript("enqueue")
	cancelScript        = loadScript("cancel")
	cancelShardedScript = loadScript("cancel.sharded")

	_ = enqueueScript.layout.expectArgs("enqueue", "count", "priorities", "span_ms", "resend", "jobs")
	_ = cancelScript.layout.expectArgs("cancel", "id", "result_ttl_ms", "abort_channel", "settled_channel")
)

// eval runs a script by its SHA1, loading it (EVAL) when Redis does not have it: a
// NOSCRIPT reply means it did not run, so running it again is safe.
func (s script) eval(c *call, keys []any, args []any) (any, error) {
	argv := make([]any, 0, 2+len(keys)+len(args))
	argv = append(argv, s.sha)
	if keys != nil { // (else args begin with the key count)
		argv = append(argv, len(keys))
		argv = append(argv, keys...)
	}
	argv = append(argv, args...)
	reply, err := c.do("EVALSHA", argv...)
	if err != nil && isNoScript(err) {
		argv[0] = s.source
		reply, err = c.do("EVAL", argv...)
	}
	return reply, err
}
