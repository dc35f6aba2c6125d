package wire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// A message encoded once for many replicas gives, under each id, the very
// bytes EncodeToReplica gives for the message under that id: a replica
// cannot tell a shared body from one built for it alone, and the sums the
// server keeps of what it issued are the same.
func TestSharedToReplicaBytesAreThoseEncodedUnderTheID(t *testing.T) {
	t.Parallel()
	for _, sample := range []struct {
		name string
		msg  func() *syncpb.ToReplica
	}{
		{"down", sampleDown},
		{"end of snapshot", sampleEndSnapshot},
		{"filed", sampleFiled},
		{"filed merged", sampleFiledMerged},
	} {
		shared, err := EncodeToReplicaShared(sample.msg())
		if err != nil {
			t.Fatalf("%s: %v", sample.name, err)
		}
		for _, id := range []uint64{1, 127, 128, 300, 1 << 35, 1<<62 - 1} {
			m := sample.msg()
			m.Id = id
			want, err := EncodeToReplica(m)
			if err != nil {
				t.Fatal(err)
			}
			if got := shared.Bytes(id); !bytes.Equal(got, want) {
				t.Errorf("%s under id %d:\n got % x\nwant % x", sample.name, id, got, want)
			}
		}
	}
}

// The shared encoding checks the message as EncodeToReplica does, and
// leaves it as it was.
func TestSharedToReplicaRefusesWhatEncodeToReplicaRefuses(t *testing.T) {
	t.Parallel()
	m := sampleDown()
	m.Body = nil
	if _, err := EncodeToReplicaShared(m); !errors.Is(err, ErrMalformed) {
		t.Errorf("a message without a body: %v; want ErrMalformed", err)
	}
	m = sampleDown()
	m.Id = 42
	if _, err := EncodeToReplicaShared(m); err != nil {
		t.Fatal(err)
	}
	if m.Id != 42 {
		t.Errorf("the message's id became %d", m.Id)
	}
}
