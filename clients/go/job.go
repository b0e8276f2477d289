package aioqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Status is where a job is in its life (the record's "s" field).
type Status string

// A job's statuses; Finished tells the last five apart.
const (
	StatusWaiting   Status = "waiting"
	StatusQueued    Status = "queued"
	StatusScheduled Status = "scheduled"
	StatusActive    Status = "active"
	StatusComplete  Status = "complete"
	StatusFailed    Status = "failed"
	StatusDead      Status = "dead"
	StatusCancelled Status = "cancelled"
	StatusExpired   Status = "expired"
)

// Finished: the job will not run again (complete, failed, dead, cancelled, expired).
func (s Status) Finished() bool {
	switch s {
	case StatusComplete, StatusFailed, StatusDead, StatusCancelled, StatusExpired:
		return true
	}
	return false
}

// Job is a handle on one job of a queue.
type Job struct {
	queue *Queue
	// ID is the job's id: generated, or given with WithID.
	ID string
	// Created is false when the enqueue found a job with this id already.
	Created bool
}

// Job is a handle on an existing job of this queue.
func (q *Queue) Job(id string) *Job { return &Job{queue: q, ID: id, Created: true} }

// Queue is the job's queue.
func (j *Job) Queue() *Queue { return j.queue }

// Status reads the job's status; a *JobError wrapping ErrJobNotFound if it has none.
func (j *Job) Status(ctx context.Context) (Status, error) {
	var status Status
	err := j.queue.client.withConn(ctx, j.queue.keys.base, func(k *call, _ bool) error {
		raw, err := redis.String(k.do("HGET", j.queue.keys.job(j.ID), "s"))
		if err == nil {
			status = Status(raw)
			return nil
		}
		if err != redis.ErrNil {
			return err
		}
		done, err := j.isDone(k)
		if err == nil && done {
			status = StatusComplete
		} else if err == nil {
			return &JobError{JobID: j.ID, Err: ErrJobNotFound}
		}
		return err
	})
	return status, err
}

// record is what a finished job's record says (docs/protocol.md, Reading a job).
type record struct {
	status Status
	result []byte
	error  []byte
}

func (j *Job) read(ctx context.Context) (record, error) {
	var r record
	err := j.queue.client.withConn(ctx, j.queue.keys.base, func(k *call, _ bool) error {
		fields, err := redis.StringMap(k.do("HGETALL", j.queue.keys.job(j.ID)))
		if err != nil {
			return err
		}
		if state, ok := fields["s"]; ok {
			r = record{Status(state), []byte(fields["r"]), []byte(fields["e"])}
			return nil
		}
		done, err := j.isDone(k)
		if err == nil && !done {
			return &JobError{JobID: j.ID, Err: ErrJobNotFound}
		}
		r = record{status: StatusComplete}
		return err
	})
	return r, err
}

// isDone: the id's fingerprint is in a done set (completed with no result), one of the
// generations either side of this host's clock (docs/protocol.md, Done sets).
func (j *Job) isDone(k *call) (bool, error) {
	span := j.queue.client.cfg.IdempotencyTTL.Milliseconds()
	if span <= 0 {
		return false, nil
	}
	generation, slot, member := time.Now().UnixMilli()/span, doneSlot(j.ID), fingerprint(j.ID)
	generations := []int64{generation + 1, generation, generation - 1, generation - 2}
	found := false
	if !k.pipelined {
		for _, g := range generations {
			reply, err := redis.Int(k.do("SISMEMBER", j.queue.keys.done(span, g, slot), member))
			if err != nil {
				return false, err
			}
			found = found || reply == 1
		}
		return found, nil
	}
	for _, g := range generations {
		if err := k.conn.Send("SISMEMBER", j.queue.keys.done(span, g, slot), member); err != nil {
			return false, err
		}
	}
	if err := k.conn.Flush(); err != nil {
		return false, err
	}
	for range generations {
		reply, err := redis.Int(receive(k))
		if err != nil {
			return false, err
		}
		found = found || reply == 1
	}
	return found, nil
}

// Result waits for the job to finish and decodes its return value into v (as
// json.Unmarshal does; v may be nil), or returns its error: a *JobError wrapping
// ErrJobFailed (with the handler's error), ErrJobCancelled, ErrJobExpired or
// ErrJobNotFound, or the context's error. It waits without polling: it subscribes to
// the queue's settled channel, then reads the status, and reads the record again only
// when the job's id is announced (or every PollInterval, in case an announcement was
// lost with a connection).
func (j *Job) Result(ctx context.Context, v any) error {
	wake, release := j.queue.client.listener(j.queue.keys.settled()).wait(ctx, j.ID)
	defer release()
	status, err := j.Status(ctx)
	if err != nil {
		return err
	}
	poll := j.queue.client.cfg.PollInterval
	for !status.Finished() {
		timer := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("aioqueue: waiting for job %s: %w", j.ID, ctx.Err())
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
		r, err := j.read(ctx)
		if err != nil {
			return err
		}
		if r.status.Finished() {
			return j.outcome(r, v)
		}
		status = r.status
	}
	r, err := j.read(ctx)
	if err != nil {
		return err
	}
	return j.outcome(r, v)
}

func (j *Job) outcome(r record, v any) error {
	switch r.status {
	case StatusComplete:
		if v == nil || len(r.result) == 0 {
			return nil
		}
		if err := json.Unmarshal(r.result, v); err != nil {
			return fmt.Errorf("aioqueue: job %s: its result does not decode into %T: %w", j.ID, v, err)
		}
		return nil
	case StatusCancelled:
		return &JobError{JobID: j.ID, Err: ErrJobCancelled}
	case StatusExpired:
		return &JobError{JobID: j.ID, Err: ErrJobExpired}
	}
	failed := &JobError{JobID: j.ID, Err: ErrJobFailed, Type: "Unknown", Message: "no error recorded"}
	var body struct {
		Type      string `json:"type"`
		Message   string `json:"message"`
		Traceback string `json:"traceback"`
	}
	if len(r.error) > 0 {
		if json.Unmarshal(r.error, &body) == nil && body.Type != "" {
			failed.Type, failed.Message, failed.Traceback = body.Type, body.Message, body.Traceback
		} else {
			failed.Message = string(r.error)
		}
	}
	return failed
}

// Cancel cancels the job if it is queued, scheduled or waiting (it never runs), or asks
// for its abort if it is running. False if it had finished already or does not exist.
func (j *Job) Cancel(ctx context.Context) (bool, error) {
	k := j.queue.keys
	keys := cancelScript.layout.keysFor(k, nil)
	args := []any{j.ID, j.queue.client.cfg.ResultTTL.Milliseconds(), k.key("aborts"), k.settled()}
	var code int
	err := j.queue.client.withConn(ctx, j.queue.keys.base, func(c *call, retry bool) error {
		script := cancelScript
		if !c.pipelined { // a Redis Cluster: its build publishes with SPUBLISH
			script = cancelShardedScript
		}
		values, err := redis.Values(script.eval(c, keys, args))
		if err != nil {
			return err
		}
		if len(values) != 2 {
			return fmt.Errorf("cancel.lua replied %v", values)
		}
		code, _ = redis.Int(values[0], nil)
		if state, _ := redis.String(values[1], nil); retry && code == 0 && state == "cancelled" {
			code = 1 // the first call, whose reply was lost, cancelled it
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("aioqueue: cancel %s: %w", j.ID, err)
	}
	return code == 1 || code == 2, nil
}
