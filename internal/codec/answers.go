package codec

import "github.com/magicsync/magicsync/internal/wire"

// AnswersTable is the name a digest of a replica's answers to wishes goes
// under: the engine's table of wishes, on both sides.
const AnswersTable = "sync_wishes"

// AnswerTuple is the tuple a digest of answers adds for one answer: the
// setting's table, its row's canonical key, the wish's number and the
// answer's state (as the protocol numbers it), so that both sides hash an
// answer alike.
func AnswerTuple(table string, key []byte, wish uint64, state int) []byte {
	return wire.AppendTuple(nil, []wire.Value{
		{Kind: wire.Text, S: table},
		{Kind: wire.Bytes, B: key},
		{Kind: wire.Int, I: int64(wish)},
		{Kind: wire.Int, I: int64(state)},
	})
}
