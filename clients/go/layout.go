package aioqueue

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// A script's KEYS and ARGV, read from its header (as aioqueue/store/layout.py reads them):
// KEYS are built from it, so a key renamed, added or moved there is followed; ARGV names
// are checked against what this client sends when the script is loaded.

var slotLine = regexp.MustCompile(`(?m)^(KEYS|ARGV)\[(\d+)(\.\.(\d*))?\]\s+([a-z_]+)\b`)

type slot struct {
	name  string
	group bool
	size  int // a group's size; -1: as many as the call brings
}

type layout struct {
	keys, args []slot
}

func parseLayout(source string) layout {
	header := strings.SplitN(source, "]]", 2)[0]
	var l layout
	for _, m := range slotLine.FindAllStringSubmatch(header, -1) {
		s := slot{name: m[5], group: m[3] != "", size: 1}
		if s.group {
			s.size = -1
			if m[4] != "" {
				first, _ := strconv.Atoi(m[2])
				last, _ := strconv.Atoi(m[4])
				s.size = last - first + 1
			}
		}
		if m[1] == "KEYS" {
			l.keys = append(l.keys, s)
		} else {
			l.args = append(l.args, s)
		}
	}
	return l
}

// roles: a KEYS name -> the key's role after "<prefix>:{<queue>}:" (core/keys.py's names;
// any other name is its own role).
var roles = map[string]string{
	"job_prefix": "job:", "done_prefix": "donefp:", "ready_prefix": "ready:",
	"direct_prefix": "direct:", "taken_prefix": "take:", "schedule_wake": "schedule:wake",
	"ticks": "periodic:ticks",
}

// keysFor: the KEYS of one call; `ready` fills an open group of ready lists.
func (l layout) keysFor(k queueKeys, ready []int) []any {
	var out []any
	for _, s := range l.keys {
		switch {
		case !s.group:
			role, ok := roles[s.name]
			if !ok {
				role = s.name
			}
			out = append(out, k.key(role))
		case s.name == "links":
			out = append(out, k.links()...)
		case s.name == "ready" && s.size < 0:
			for _, p := range ready {
				out = append(out, k.ready(p))
			}
		case s.name == "ready":
			for p := 0; p < s.size; p++ {
				out = append(out, k.ready(p))
			}
		default:
			panic(fmt.Sprintf("aioqueue: a script declares KEYS group %q, which this client does not know", s.name))
		}
	}
	return out
}

// expectArgs panics unless the header's ARGV are `names`, in order: the client sends them so.
func (l layout) expectArgs(script string, names ...string) layout {
	var have []string
	for _, s := range l.args {
		have = append(have, s.name)
	}
	if strings.Join(have, ",") != strings.Join(names, ",") {
		panic(fmt.Sprintf("aioqueue: %s.lua takes ARGV %v, this client sends %v", script, have, names))
	}
	return l
}
