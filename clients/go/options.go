package aioqueue

import (
	"math"
	"time"
)

// Priorities: 0..9, a higher number runs first; these are Python's names for three.
const (
	PriorityLow    = 0
	PriorityNormal = 5
	PriorityHigh   = 9
)

// An Option sets one per-call option of an enqueue. Options never share a namespace with
// the task's arguments (Args). A bad option fails the enqueue before anything is written.
type Option func(*jobOptions) error

type jobOptions struct {
	id          string
	priority    int
	delay       time.Duration
	at          time.Time
	timeout     time.Duration
	maxAttempts int
	expires     time.Duration
	headers     map[string]string
}

// WithID gives the job its id: an idempotency key. Enqueueing an id that has a job
// (queued, scheduled, running, or finished within the result TTL) writes nothing and
// returns that job, with Job.Created false.
func WithID(id string) Option {
	return func(o *jobOptions) error {
		if err := checkJobID(id); err != nil {
			return err
		}
		o.id = id
		return nil
	}
}

// WithPriority sets the priority, 0..9 (PriorityLow, PriorityNormal, PriorityHigh);
// PriorityNormal when not set.
func WithPriority(priority int) Option {
	return func(o *jobOptions) error {
		if priority < 0 || priority >= priorityLevels {
			return invalid("priority must be 0..9, got %d", priority)
		}
		o.priority = priority
		return nil
	}
}

// WithDelay makes the job due this long from now (by the Redis clock, milliseconds).
func WithDelay(delay time.Duration) Option {
	return func(o *jobOptions) error {
		if delay < 0 {
			return invalid("delay must not be negative, got %v", delay)
		}
		o.delay = delay
		return nil
	}
}

// WithAt makes the job due at t (with WithDelay too, the later of the two).
func WithAt(t time.Time) Option {
	return func(o *jobOptions) error {
		if t.IsZero() {
			return invalid("at must be a time, not the zero time")
		}
		o.at = t
		return nil
	}
}

// WithTimeout overrides the task's timeout for this job (positive).
func WithTimeout(timeout time.Duration) Option {
	return func(o *jobOptions) error {
		if timeout <= 0 {
			return invalid("timeout must be positive, got %v", timeout)
		}
		o.timeout = timeout
		return nil
	}
}

// WithMaxAttempts sets how many attempts the job gets (at least 1); not set, the
// worker's default.
func WithMaxAttempts(attempts int) Option {
	return func(o *jobOptions) error {
		if attempts < 1 {
			return invalid("max attempts must be at least 1, got %d", attempts)
		}
		o.maxAttempts = attempts
		return nil
	}
}

// WithExpires: a job not started this long after it was due ends "expired", never run.
func WithExpires(expires time.Duration) Option {
	return func(o *jobOptions) error {
		if expires <= 0 {
			return invalid("expires must be positive, got %v", expires)
		}
		o.expires = expires
		return nil
	}
}

// WithHeaders sends headers with the job (a handler reads them as JobContext.headers),
// e.g. W3C trace context ("traceparent").
func WithHeaders(headers map[string]string) Option {
	return func(o *jobOptions) error {
		o.headers = headers
		return nil
	}
}

func resolve(opts []Option) (jobOptions, error) {
	o := jobOptions{priority: PriorityNormal}
	for _, opt := range opts {
		if opt == nil {
			return o, invalid("a nil Option")
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// millis rounds a positive duration to whole milliseconds, at least 1.
func millis(d time.Duration) int64 {
	return int64(math.Max(1, math.Round(float64(d)/float64(time.Millisecond))))
}
