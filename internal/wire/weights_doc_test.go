package wire

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// The crowded rule's edges as PROTOCOL.md section 1 states them: a
// singular string adds its bytes and no entry weight, a known field's tag
// and length count for nothing, an unknown field counts every byte of
// it, and a known number with another wire type is an unknown field.
func TestTheWeightOfAMessageIsAsTheProtocolDocumentCountsIt(t *testing.T) {
	t.Parallel()
	msg := &syncpb.ToReplica{Protocol: 1, Id: 98, Body: &syncpb.ToReplica_Filed{Filed: &syncpb.Filed{Lane: "main", Sequence: 17}}}
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	weight := func(b []byte) int {
		t.Helper()
		s, err := scanMessage(b, true)
		if err != nil {
			t.Fatal(err)
		}
		return s.total()
	}
	if got := weight(b); got != 96+112+4 {
		t.Errorf("the documented Filed weighs %d; PROTOCOL.md says 96 + 112 + 4 = 212", got)
	}
	doc, err := os.ReadFile("../../proto/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), "weighs 96 + 112 + 4 = 212") {
		t.Error("PROTOCOL.md no longer shows the weight of its Filed")
	}
	// An unknown field 15, a varint: its tag (1 byte) and value (2 bytes).
	unknown := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), b...), 15, protowire.VarintType), 300)
	if got := weight(unknown) - weight(b); got != 3 {
		t.Errorf("an unknown varint field of 3 bytes weighs %d; want 3", got)
	}
	// Field 2 (id, a varint) as bytes: unknown, every byte of it counted:
	// tag 1, length 1, value 4.
	wrongType := protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), b...), 2, protowire.BytesType), []byte("abcd"))
	if got := weight(wrongType) - weight(b); got != 6 {
		t.Errorf("a known number with the wrong wire type (6 bytes) weighs %d; want 6, as an unknown field", got)
	}
}
