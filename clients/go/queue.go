package aioqueue

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// maxBatch is the most jobs one enqueue script call carries (as in Python).
const maxBatch = 1000

// Queue is one named queue: enqueue jobs, look at them, cancel them.
type Queue struct {
	client *Client
	keys   queueKeys
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.keys.name }

// Call is one job of an EnqueueMany.
type Call struct {
	Task    string
	Args    Arguments
	Options []Option
}

// Enqueue writes one job for the task named task and returns its handle once the job is
// in Redis. Bad input (an option out of range, arguments JSON cannot carry exactly, a
// payload over MaxPayloadBytes) returns an error and writes nothing. With WithID, an id
// that already has a job writes nothing and returns that job (Created false).
func (q *Queue) Enqueue(ctx context.Context, task string, args Arguments, opts ...Option) (*Job, error) {
	jobs, err := q.EnqueueMany(ctx, []Call{{Task: task, Args: args, Options: opts}})
	if err != nil {
		return nil, err
	}
	return jobs[0], nil
}

// EnqueueMany writes jobs in order, in script calls of up to 1,000 jobs pipelined in one
// round trip. Every call is checked and encoded first: one bad call writes nothing.
func (q *Queue) EnqueueMany(ctx context.Context, calls []Call) ([]*Job, error) {
	jobs := make([]newJob, len(calls))
	for i, c := range calls {
		job, err := q.prepare(c)
		if err != nil {
			if len(calls) > 1 {
				return nil, fmt.Errorf("call %d: %w", i, err)
			}
			return nil, err
		}
		jobs[i] = job
	}
	results := make([]*Job, 0, len(jobs))
	err := q.client.withConn(ctx, q.keys.base, func(k *call, retry bool) error {
		results = results[:0]
		if !k.pipelined {
			return q.enqueueEach(k, jobs, retry, &results)
		}
		for start := 0; start < len(jobs); start += maxBatch {
			if err := k.conn.Send("EVALSHA", q.enqueueArgs(enqueueScript.sha, jobs[start:min(start+maxBatch, len(jobs))], retry)...); err != nil {
				return err
			}
		}
		return q.receiveEnqueued(k, jobs, retry, &results)
	})
	var lost *connectionLost
	switch {
	case errors.As(err, &lost):
		return nil, fmt.Errorf("aioqueue: %w: %d job(s) (first id %s) may have landed, enqueue them again with their ids: %s: %v",
			ErrUnconfirmed, len(jobs), jobs[0].id, lost.url, lost.err)
	case errors.Is(err, ErrServerUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return nil, err // nothing was sent
	case err != nil:
		return nil, fmt.Errorf("aioqueue: enqueue on %s: %w", q.keys.name, err)
	}
	return results, nil
}

func (q *Queue) receiveEnqueued(k *call, jobs []newJob, retry bool, results *[]*Job) error {
	if err := k.conn.Flush(); err != nil {
		return err
	}
	var replies []any
	var errs []error
	for start := 0; start < len(jobs); start += maxBatch {
		reply, err := receive(k)
		if err != nil && !isNoScript(err) {
			return err
		}
		replies, errs = append(replies, reply), append(errs, err)
	}
	for n, start := 0, 0; start < len(jobs); n, start = n+1, start+maxBatch {
		chunk := jobs[start:min(start+maxBatch, len(jobs))]
		reply := replies[n]
		if errs[n] != nil { // NOSCRIPT: it never ran; again with its source
			var err error
			if reply, err = k.do("EVAL", q.enqueueArgs(enqueueScript.source, chunk, retry)...); err != nil {
				return err
			}
		}
		if err := q.collect(reply, chunk, results); err != nil {
			return err
		}
	}
	return nil
}

// enqueueEach: one script call after another (on a Cluster, each follows redirections).
func (q *Queue) enqueueEach(k *call, jobs []newJob, retry bool, results *[]*Job) error {
	for start := 0; start < len(jobs); start += maxBatch {
		chunk := jobs[start:min(start+maxBatch, len(jobs))]
		args := q.enqueueArgs("", chunk, retry)
		reply, err := enqueueScript.eval(k, nil, args[1:])
		if err != nil {
			return err
		}
		if err := q.collect(reply, chunk, results); err != nil {
			return err
		}
	}
	return nil
}

func (q *Queue) collect(reply any, chunk []newJob, results *[]*Job) error {
	values, err := redis.Values(reply, nil)
	if err != nil || len(values) != 2*len(chunk) {
		return fmt.Errorf("enqueue.lua replied %v", reply)
	}
	for i, job := range chunk {
		created, _ := redis.Int(values[2*i], nil)
		*results = append(*results, &Job{queue: q, ID: job.id, Created: created == 1})
	}
	return nil
}

func isNoScript(err error) bool { return strings.HasPrefix(err.Error(), "NOSCRIPT") }

func receive(k *call) (any, error) {
	timeout := k.timeout
	if deadline, ok := k.ctx.Deadline(); ok && time.Until(deadline) < timeout {
		timeout = time.Until(deadline)
	}
	reply, err := redis.ReceiveWithTimeout(k.conn, timeout)
	if err != nil && k.ctx.Err() != nil {
		return nil, k.ctx.Err()
	}
	return reply, err
}

// newJob is one job as enqueue.lua takes it (seven ARGV fields).
type newJob struct {
	id          string
	payload     []byte
	priority    int
	maxAttempts int
	delayMs     int64
	dueMs       int64
	fresh       bool
}

func (q *Queue) prepare(c Call) (newJob, error) {
	o, err := resolve(c.Options)
	if err != nil {
		return newJob{}, err
	}
	raw, err := encodePayload(c.Task, c.Args, o, q.client.cfg.MaxPayloadBytes)
	if err != nil {
		return newJob{}, err
	}
	job := newJob{id: o.id, payload: raw, priority: o.priority, maxAttempts: o.maxAttempts}
	if job.id == "" {
		job.id, job.fresh = newJobID(), true
	}
	if o.delay > 0 {
		job.delayMs = o.delay.Milliseconds()
	}
	if !o.at.IsZero() {
		job.dueMs = o.at.UnixMilli()
	}
	return job, nil
}

// enqueueArgs: EVALSHA's (or EVAL's) arguments for one call of enqueue.lua, KEYS and
// ARGV as its header states them (docs/protocol.md, enqueue).
func (q *Queue) enqueueArgs(script string, jobs []newJob, resend bool) []any {
	seen := map[int]bool{}
	var priorities []int
	for _, job := range jobs {
		if !seen[job.priority] {
			seen[job.priority] = true
			priorities = append(priorities, job.priority)
		}
	}
	sort.Ints(priorities)
	keys := enqueueScript.layout.keysFor(q.keys, priorities)
	names := make([]string, len(priorities))
	for i, p := range priorities {
		names[i] = strconv.Itoa(p)
	}
	args := make([]any, 0, 2+len(keys)+4+7*len(jobs))
	args = append(args, script, len(keys))
	args = append(args, keys...)
	resendFlag := 0
	if resend {
		resendFlag = 1
	}
	spanMs := q.client.cfg.IdempotencyTTL.Milliseconds()
	args = append(args, len(jobs), strings.Join(names, ","), spanMs, resendFlag)
	for _, job := range jobs {
		fresh := 0
		if job.fresh {
			fresh = 1
		}
		args = append(args, job.id, job.payload, job.priority, job.maxAttempts, job.delayMs, job.dueMs, fresh)
	}
	return args
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
