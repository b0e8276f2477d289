// Command welcome enqueues a job for the Python worker of the README (tasks.py: the
// send_welcome task on the "emails" queue), waits for its result, and shows a failure
// and two refusals.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	aioqueue "aioqueue.dev/go"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	client, err := aioqueue.NewClient(os.Getenv("REDIS_URL"), aioqueue.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	emails, err := client.Queue("emails")
	if err != nil {
		log.Fatal(err)
	}

	job, err := emails.Enqueue(ctx, "send_welcome",
		aioqueue.Args("ada@example.com").Kwargs(map[string]any{"name": "Ada"}),
		aioqueue.WithID("welcome-ada"), aioqueue.WithDelay(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued", job.ID, "created:", job.Created)

	var sent struct {
		SentTo   string `json:"sent_to"`
		Greeting string `json:"greeting"`
	}
	if err := job.Result(ctx, &sent); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", sent)

	bad, err := emails.Enqueue(ctx, "send_welcome", aioqueue.Args("bob@invalid"), aioqueue.WithMaxAttempts(1))
	if err != nil {
		log.Fatal(err)
	}
	var failed *aioqueue.JobError
	if err := bad.Result(ctx, nil); errors.As(err, &failed) && errors.Is(err, aioqueue.ErrJobFailed) {
		fmt.Println("failed as expected:", failed.Type, "-", failed.Message)
	}
	_, err = emails.Enqueue(ctx, "send_welcome", aioqueue.Args(map[string]any{"x": func() {}}))
	fmt.Println("refused:", err)
	_, err = emails.Enqueue(ctx, "send_welcome", aioqueue.Args("x"), aioqueue.WithPriority(12))
	fmt.Println("refused:", err)
}
