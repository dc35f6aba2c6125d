package natssync_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/magicsync/magicsync/replica"
	"github.com/magicsync/magicsync/transport/natssync"
	"github.com/magicsync/magicsync/transport/natssync/embedded"
)

// receiverFunc adapts a function to a Receiver.
type receiverFunc func(ctx context.Context, msg []byte) (replica.Received, error)

func (f receiverFunc) Receive(ctx context.Context, msg []byte) (replica.Received, error) {
	return f(ctx, msg)
}

// While the Online hook answers false the client makes no request: Send
// fails at once with ErrOffline, retryably, and the receive loop asks for
// nothing until the hook answers true again.
func TestOfflineTheClientMakesNoRequest(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, embedded.Options{})
	id := uuid.New()
	office, err := natssync.Connect(ns.URL(), uuid.New())
	if err != nil {
		t.Fatal(err)
	}
	defer office.Close()
	var requests atomic.Int64
	sub, err := office.Subscribe(natssync.DefaultPrefix+".*.*", func(m *nats.Msg) {
		requests.Add(1)
		reply := newReply(m, "204")
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := office.Flush(); err != nil {
		t.Fatal(err)
	}
	nc, err := natssync.Connect(ns.URL(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var online atomic.Bool
	client := natssync.NewClient(nc, id, natssync.JoinToken(id, "s"), natssync.ClientOptions{
		PollWait: 50 * time.Millisecond, BackoffMin: 10 * time.Millisecond, Logger: quiet(), Online: online.Load})
	err = client.Send(context.Background(), id, "main", []byte{1})
	if se, ok := errors.AsType[*replica.SendError](err); !ok || !se.Retryable || !errors.Is(err, natssync.ErrOffline) {
		t.Fatalf("offline, Send = %v; want a retryable failure wrapping ErrOffline", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- client.ReceiveLoop(ctx, receiverFunc(func(context.Context, []byte) (replica.Received, error) {
			return replica.Received{}, nil
		}))
	}()
	// The loop asks the hook every 100 ms; a few rounds of it, offline.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n := requests.Load(); n != 0 {
			t.Fatalf("offline, the client made %d requests", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	online.Store(true)
	eventually(t, "the receive loop asks once online", func() bool { return requests.Load() > 0 })
	stop()
	if err := <-done; err != nil {
		t.Fatalf("ReceiveLoop = %v", err)
	}
}

// newReply is a reply to m with status.
func newReply(m *nats.Msg, status string) *nats.Msg {
	r := nats.NewMsg(m.Reply)
	r.Header.Set(natssync.HeaderStatus, status)
	return r
}
