package aioqueue

import (
	"errors"
	"fmt"
)

// Errors a call can be tested for with errors.Is. Input errors (ErrInvalidOption,
// ErrSerialization, ErrPayloadTooLarge) mean nothing was written to Redis.
var (
	// ErrInvalidOption: an option, a queue name or a setting is out of range.
	ErrInvalidOption = errors.New("invalid option")
	// ErrSerialization: the arguments cannot travel as JSON exactly as given (a value
	// JSON cannot hold, NaN or an infinity, invalid UTF-8, an integer beyond 64 bits).
	ErrSerialization = errors.New("arguments are not JSON-serializable")
	// ErrPayloadTooLarge: the encoded job is over the client's MaxPayloadBytes.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrServerUnavailable: Redis could not be reached; nothing was sent.
	ErrServerUnavailable = errors.New("redis unavailable")
	// ErrUnconfirmed: Redis failed during an enqueue; the jobs may have landed. Enqueue
	// again with the same ids (an id is an idempotency key): nothing runs twice.
	ErrUnconfirmed = errors.New("enqueue unconfirmed")

	// ErrJobNotFound: no such job (never enqueued, or its record expired).
	ErrJobNotFound = errors.New("job not found")
	// ErrJobFailed: the job failed or went dead; the JobError says how.
	ErrJobFailed = errors.New("job failed")
	// ErrJobCancelled: the job was cancelled (or aborted while running).
	ErrJobCancelled = errors.New("job cancelled")
	// ErrJobExpired: the job did not start within its expiry and never ran.
	ErrJobExpired = errors.New("job expired")
)

// JobError is about one job: Err is ErrJobNotFound, ErrJobFailed, ErrJobCancelled or
// ErrJobExpired; for a failure, Type, Message and Traceback are the handler's error.
type JobError struct {
	JobID     string
	Err       error
	Type      string
	Message   string
	Traceback string
}

func (e *JobError) Error() string {
	if e.Err == ErrJobFailed {
		return fmt.Sprintf("aioqueue: job %s failed: %s: %s", e.JobID, e.Type, e.Message)
	}
	return fmt.Sprintf("aioqueue: job %s: %v", e.JobID, e.Err)
}

func (e *JobError) Unwrap() error { return e.Err }

// PayloadTooLargeError says by how much an encoded job is over the limit.
type PayloadTooLargeError struct {
	Size, Limit int
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("aioqueue: encoded job is %d bytes, over the limit of %d bytes", e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrPayloadTooLarge) true.
func (e *PayloadTooLargeError) Is(target error) bool { return target == ErrPayloadTooLarge }

func invalid(format string, args ...any) error {
	return fmt.Errorf("aioqueue: %w: "+format, append([]any{ErrInvalidOption}, args...)...)
}
