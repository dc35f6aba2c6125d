package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// fieldID is the number of ToReplica's id.
const fieldID protowire.Number = 2

// SharedToReplica is a message to a replica encoded once for the many
// replicas it goes to, each under an id of its own: Bytes returns what
// EncodeToReplica returns for the message under that id, byte for byte,
// without encoding it again. The id is the envelope's second field, so the
// bytes under an id are those encoded without it with the id's field
// spliced in after the protocol.
type SharedToReplica struct {
	head, tail []byte // before and after the id's field
}

// EncodeToReplicaShared encodes m, whatever its Id, for Bytes to give it
// any id. It checks m as EncodeToReplica does (under the id 1); m is left
// as it was.
func EncodeToReplicaShared(m *syncpb.ToReplica) (SharedToReplica, error) {
	if m == nil {
		return SharedToReplica{}, fmt.Errorf("encoding a message to a replica: %w: nil message", ErrMalformed)
	}
	if m.Protocol == 0 {
		m = withProtocol(m)
	}
	id := m.Id
	defer func() { m.Id = id }()
	m.Id = 1
	if err := checkToReplica(m); err != nil {
		return SharedToReplica{}, fmt.Errorf("encoding a message to a replica: %w", err)
	}
	m.Id = 0
	b, err := deterministic.Marshal(m)
	if err != nil {
		return SharedToReplica{}, fmt.Errorf("encoding a message to a replica: %w", err)
	}
	if len(b)+protowire.SizeTag(fieldID)+protowire.SizeVarint(maxSharedID) > MaxMessageBytes {
		return SharedToReplica{}, fmt.Errorf("encoding a message to a replica: %w: %d bytes, the bound is %d", ErrTooLarge, len(b), MaxMessageBytes)
	}
	split := 0
	if num, typ, n := protowire.ConsumeTag(b); n > 0 && num == fieldProtocol && typ == protowire.VarintType {
		if _, m := protowire.ConsumeVarint(b[n:]); m > 0 {
			split = n + m
		}
	}
	shared := SharedToReplica{head: b[:split], tail: b[split:]}
	if _, err := scanMessage(shared.Bytes(1), true); err != nil {
		return SharedToReplica{}, fmt.Errorf("encoding a message to a replica: %w", err)
	}
	return shared, nil
}

// maxSharedID bounds the ids Bytes is given, for the size check.
const maxSharedID = 1<<64 - 1

// Bytes returns the message's bytes under id (above zero).
func (s SharedToReplica) Bytes(id uint64) []byte {
	b := make([]byte, 0, len(s.head)+len(s.tail)+protowire.SizeTag(fieldID)+protowire.SizeVarint(id))
	b = append(b, s.head...)
	b = protowire.AppendTag(b, fieldID, protowire.VarintType)
	b = protowire.AppendVarint(b, id)
	return append(b, s.tail...)
}
