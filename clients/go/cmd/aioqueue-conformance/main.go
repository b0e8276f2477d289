// Command aioqueue-conformance runs a conformance case (tests/conformance/cases) with the
// Go client: it reads the case and where to run it as JSON on stdin and writes one JSON
// line per step on stdout (tests/conformance/runners.py describes the exchange).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"strconv"
	"strings"
	"time"

	aioqueue "aioqueue.dev/go"
)

type input struct {
	URL    string           `json:"url"`
	Prefix string           `json:"prefix"`
	Queue  string           `json:"queue"`
	Config map[string]int   `json:"config"`
	Steps  []map[string]any `json:"steps"`
}

type runner struct {
	queue *aioqueue.Queue
	jobs  [][]*aioqueue.Job // per step, the jobs it enqueued
}

func main() {
	decoder := json.NewDecoder(os.Stdin)
	decoder.UseNumber()
	var in input
	if err := decoder.Decode(&in); err != nil {
		fail(err)
	}
	cfg := aioqueue.Config{Prefix: in.Prefix, MaxPayloadBytes: in.Config["max_payload_bytes"]}
	client, err := aioqueue.NewClient(in.URL, cfg)
	if err != nil {
		fail(err)
	}
	defer client.Close()
	queue, err := client.Queue(in.Queue)
	if err != nil {
		fail(err)
	}
	r := &runner{queue: queue}
	out := json.NewEncoder(os.Stdout)
	for _, step := range in.Steps {
		if step["do"] == "bench" {
			fail(r.bench(step, out))
			continue
		}
		if err := out.Encode(r.step(step)); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "aioqueue-conformance:", err)
		os.Exit(1)
	}
}

func (r *runner) step(step map[string]any) map[string]any {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := float64(time.Now().UnixNano()) / 1e6
	var jobs []*aioqueue.Job
	var result map[string]any
	var err error
	switch step["do"] {
	case "enqueue":
		result, err = r.enqueue(ctx, step, &jobs)
	case "enqueue_many":
		result, err = r.enqueueMany(ctx, step, &jobs)
	default:
		result, err = r.onJob(ctx, step["do"], r.job(step["job"]))
	}
	r.jobs = append(r.jobs, jobs)
	if err != nil {
		return describe(err)
	}
	if len(jobs) > 0 {
		result["before_ms"] = before
	}
	return result
}

func (r *runner) enqueue(ctx context.Context, step map[string]any, jobs *[]*aioqueue.Job) (map[string]any, error) {
	call, err := r.call(step)
	if err != nil {
		return nil, err
	}
	job, err := r.queue.Enqueue(ctx, call.Task, call.Args, call.Options...)
	if err != nil {
		return nil, err
	}
	*jobs = []*aioqueue.Job{job}
	return map[string]any{"id": job.ID, "created": job.Created}, nil
}

func (r *runner) onJob(ctx context.Context, do any, job *aioqueue.Job) (map[string]any, error) {
	switch do {
	case "status":
		status, err := job.Status(ctx)
		return map[string]any{"status": status}, err
	case "result":
		var value json.RawMessage
		err := job.Result(ctx, &value)
		if value == nil {
			value = json.RawMessage("null")
		}
		return map[string]any{"value": value}, err
	case "cancel":
		cancelled, err := job.Cancel(ctx)
		return map[string]any{"cancelled": cancelled}, err
	case "wait_running":
		for {
			status, err := job.Status(ctx)
			if err != nil || status == aioqueue.StatusActive {
				return map[string]any{"status": status}, err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil, fmt.Errorf("unknown step %v", do)
}

func (r *runner) enqueueMany(ctx context.Context, step map[string]any, jobs *[]*aioqueue.Job) (map[string]any, error) {
	var calls []aioqueue.Call
	for _, raw := range step["calls"].([]any) {
		call, err := r.call(raw.(map[string]any))
		if err != nil {
			return nil, err
		}
		calls = append(calls, call)
	}
	enqueued, err := r.queue.EnqueueMany(ctx, calls)
	if err != nil {
		return nil, err
	}
	*jobs = enqueued
	var out []map[string]any
	for _, job := range enqueued {
		out = append(out, map[string]any{"id": job.ID, "created": job.Created})
	}
	return map[string]any{"jobs": out}, nil
}

// job: a step's reference to a job: a step number (its first job), [step, index], or an id.
func (r *runner) job(ref any) *aioqueue.Job {
	switch ref := ref.(type) {
	case string:
		return r.queue.Job(ref)
	case json.Number:
		n, _ := ref.Int64()
		return r.jobs[n][0]
	case []any:
		step, _ := ref[0].(json.Number).Int64()
		index, _ := ref[1].(json.Number).Int64()
		return r.jobs[step][index]
	}
	panic(fmt.Sprintf("bad job reference %v", ref))
}

func (r *runner) call(step map[string]any) (aioqueue.Call, error) {
	task, _ := step["task"].(string)
	args := aioqueue.Args(native(step["args"]).([]any)...)
	if kwargs, ok := step["kwargs"].(map[string]any); ok {
		args = args.Kwargs(native(kwargs).(map[string]any))
	}
	options, err := optionsOf(step["options"])
	return aioqueue.Call{Task: task, Args: args, Options: options}, err
}

// native turns the case's JSON into the Go values a program would pass: int64 (or
// uint64, or *big.Int past 64 bits) for integers, float64 for other numbers.
func native(value any) any {
	switch v := value.(type) {
	case nil:
		return []any{}
	case json.Number:
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return n
		}
		if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			return n
		}
		if n, ok := new(big.Int).SetString(string(v), 10); ok {
			return n
		}
		f, _ := v.Float64()
		return f
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = nativeValue(item)
		}
		return out
	case map[string]any:
		if special, ok := marker(v); ok {
			return special
		}
		out := make(map[string]any, len(v))
		for key, item := range v {
			out[key] = nativeValue(item)
		}
		return out
	}
	return value
}

// marker: the case's stand-ins for what JSON cannot write, as Go values.
func marker(v map[string]any) (any, bool) {
	if len(v) != 1 {
		return nil, false
	}
	for key, value := range v {
		switch key {
		case "$float":
			return map[string]float64{"nan": math.NaN(), "inf": math.Inf(1), "-inf": math.Inf(-1)}[value.(string)], true
		case "$unserialisable":
			return make(chan int), true
		case "$invalid_text":
			return "not UTF-8: \xff", true
		case "$repeat":
			parts := value.([]any)
			n, _ := parts[1].(json.Number).Int64()
			return strings.Repeat(parts[0].(string), int(n)), true
		}
	}
	return nil, false
}

func nativeValue(value any) any {
	if value == nil {
		return nil
	}
	return native(value)
}

func seconds(value any) time.Duration {
	f, _ := value.(json.Number).Float64()
	return time.Duration(f * float64(time.Second))
}

// optionsOf maps the case's options (Python's names, seconds) to Go's options. An
// unknown name cannot be written in Go (options are functions): the case says so.
func optionsOf(raw any) ([]aioqueue.Option, error) {
	given, _ := raw.(map[string]any)
	var out []aioqueue.Option
	for name, value := range given {
		switch name {
		case "id":
			out = append(out, aioqueue.WithID(value.(string)))
		case "priority":
			n, _ := value.(json.Number).Int64()
			out = append(out, aioqueue.WithPriority(int(n)))
		case "delay":
			out = append(out, aioqueue.WithDelay(seconds(value)))
		case "at_from_now":
			out = append(out, aioqueue.WithAt(time.Now().Add(seconds(value))))
		case "timeout":
			out = append(out, aioqueue.WithTimeout(seconds(value)))
		case "max_attempts":
			n, _ := value.(json.Number).Int64()
			out = append(out, aioqueue.WithMaxAttempts(int(n)))
		case "expires":
			out = append(out, aioqueue.WithExpires(seconds(value)))
		case "headers":
			headers := map[string]string{}
			for key, item := range value.(map[string]any) {
				headers[key] = item.(string)
			}
			out = append(out, aioqueue.WithHeaders(headers))
		default:
			return nil, fmt.Errorf("the Go runner has no option %q", name)
		}
	}
	return out, nil
}

// describe: an error as the suite compares it, by kind (tests/conformance/runners.py).
func describe(err error) map[string]any {
	var jobErr *aioqueue.JobError
	kinds := []struct {
		target error
		kind   string
	}{
		{aioqueue.ErrInvalidOption, "invalid_option"},
		{aioqueue.ErrSerialization, "serialization"},
		{aioqueue.ErrPayloadTooLarge, "payload_too_large"},
		{aioqueue.ErrJobNotFound, "not_found"},
		{aioqueue.ErrJobCancelled, "cancelled"},
		{aioqueue.ErrJobExpired, "expired"},
		{context.DeadlineExceeded, "timeout"},
	}
	for _, k := range kinds {
		if errors.Is(err, k.target) {
			return map[string]any{"error": k.kind, "message": err.Error()}
		}
	}
	if errors.As(err, &jobErr) && errors.Is(err, aioqueue.ErrJobFailed) {
		return map[string]any{"error": "failed", "type": jobErr.Type, "message": jobErr.Message}
	}
	return map[string]any{"error": "other", "message": err.Error()}
}

// bench enqueues no-op jobs one at a time, then in bulk, and reports the rates.
func (r *runner) bench(step map[string]any, out *json.Encoder) error {
	count, _ := step["count"].(json.Number).Int64()
	ctx := context.Background()
	start := time.Now()
	for i := int64(0); i < count; i++ {
		if _, err := r.queue.Enqueue(ctx, "noop", aioqueue.Args(i)); err != nil {
			return err
		}
	}
	single := time.Since(start)
	calls := make([]aioqueue.Call, count)
	for i := range calls {
		calls[i] = aioqueue.Call{Task: "noop", Args: aioqueue.Args(i)}
	}
	start = time.Now()
	if _, err := r.queue.EnqueueMany(ctx, calls); err != nil {
		return err
	}
	bulk := time.Since(start)
	return out.Encode(map[string]any{
		"single_per_s": float64(count) / single.Seconds(), "bulk_per_s": float64(count) / bulk.Seconds(),
	})
}
