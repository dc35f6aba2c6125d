package wire

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// commandID is a command id for the samples: 16 bytes, as a UUID's.
var commandID = bytes.Repeat([]byte{0xc0}, commandIDSize)

// sampleCommands is a Down carrying a command and a command withdrawn.
func sampleCommands() *syncpb.ToReplica {
	return &syncpb.ToReplica{Protocol: Protocol, Id: 7, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Commands: []*syncpb.Command{
		{Id: commandID, Name: "print-test-page", Params: []byte(`{"copies":1}`), Note: "from the office", IssuedAt: 1_700_000_000_000_000, Deadline: 1_700_000_600_000_000},
		{Id: bytes.Repeat([]byte{0xc1}, commandIDSize), Withdrawn: true},
	}}}}
}

// sampleCommandAnswers is an Up carrying a command's answer.
func sampleCommandAnswers() *syncpb.ToServer {
	return &syncpb.ToServer{Protocol: Protocol, Replica: replicaID, Lane: "main", Sequence: 2, Up: &syncpb.Up{CommandAnswers: []*syncpb.CommandAnswer{
		{Id: commandID, State: syncpb.CommandState_COMMAND_STATE_SUCCEEDED, Result: []byte("printed"), AnsweredAt: 1_700_000_001_000_000},
	}}}
}

func TestCommandsRoundTrip(t *testing.T) {
	t.Parallel()
	down := mustEncodeToReplica(t, sampleCommands())
	m, err := DecodeToReplica(down)
	if err != nil {
		t.Fatalf("decoding commands: %v", err)
	}
	if !proto.Equal(m, sampleCommands()) {
		t.Errorf("decoded %v, want %v", m, sampleCommands())
	}
	up := mustEncodeToServer(t, sampleCommandAnswers())
	u, err := DecodeToServer(up)
	if err != nil {
		t.Fatalf("decoding command answers: %v", err)
	}
	if !proto.Equal(u, sampleCommandAnswers()) {
		t.Errorf("decoded %v, want %v", u, sampleCommandAnswers())
	}
}

// A command, an answer or a wish's window that cannot be what it says is refused as
// malformed, naming the field.
func TestMalformedCommandsAndWindowsAreRefused(t *testing.T) {
	t.Parallel()
	down := func(c *syncpb.Command) *syncpb.ToReplica {
		return &syncpb.ToReplica{Protocol: Protocol, Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Commands: []*syncpb.Command{c}}}}
	}
	up := func(a *syncpb.CommandAnswer) *syncpb.ToServer {
		return &syncpb.ToServer{Protocol: Protocol, Replica: replicaID, Lane: "main", Sequence: 1, Up: &syncpb.Up{CommandAnswers: []*syncpb.CommandAnswer{a}}}
	}
	for _, tc := range []struct {
		name string
		msg  proto.Message
		want string
	}{
		{"short id", down(&syncpb.Command{Id: []byte{1, 2}, Name: "x"}), "down.commands[0]: malformed: a command id of 2 bytes, not 16"},
		{"no name", down(&syncpb.Command{Id: commandID}), "a command with no name"},
		{"deadline before 1970", down(&syncpb.Command{Id: commandID, Name: "x", Deadline: -1}), "before 1970"},
		{"answer id", up(&syncpb.CommandAnswer{Id: nil, State: syncpb.CommandState_COMMAND_STATE_FAILED}), "up.command_answers[0]"},
		{"answer queued", up(&syncpb.CommandAnswer{Id: commandID, State: syncpb.CommandState_COMMAND_STATE_QUEUED}), "state 1"},
		{"answer beyond cancelled", up(&syncpb.CommandAnswer{Id: commandID, State: 9}), "state 9"},
		{"a wish's window past the day", &syncpb.ToReplica{Protocol: Protocol, Id: 1, Body: &syncpb.ToReplica_Down{Down: &syncpb.Down{Wishes: []*syncpb.Wish{
			{Table: "t", Key: AppendTuple(nil, []Value{IntValue(1)}), Columns: []string{"c"}, Wanted: AppendTuple(nil, []Value{IntValue(2)}), WindowFrom: 1440}}}}}, "a day has 1440"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := proto.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			switch tc.msg.(type) {
			case *syncpb.ToReplica:
				_, err = DecodeToReplica(b)
			default:
				_, err = DecodeToServer(b)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decoded with %v; want an error wrapping ErrMalformed", err)
			}
			if !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}
