package wire

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/magicsync/magicsync/internal/digest"
	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Protocol is the protocol this build speaks. A message naming a higher one
// is neither acted on nor acknowledged; 0 names none, and is malformed.
const Protocol uint32 = 1

// MaxMessageBytes bounds an encoded message. The encoders refuse to build a
// larger one, and DecodeToReplica and DecodeToServer refuse to read one;
// DecodeToReplicaLimit and DecodeToServerLimit take a bound of their own.
const MaxMessageBytes = 64 << 20

// ErrTooLarge is wrapped by the error about a message above its size bound.
// A decoder's error wraps ErrMalformed too; an encoder's asks the caller to
// split what it sends over several messages.
var ErrTooLarge = errors.New("message too large")

// NewerProtocolError is the error about a message that names a protocol
// above the one this build speaks. Its receiver neither applies nor
// acknowledges it; a newer build will.
type NewerProtocolError struct {
	// Got is the protocol the message names.
	Got uint32
	// Speak is the protocol this build speaks.
	Speak uint32
}

// Error says which protocols are involved.
func (e *NewerProtocolError) Error() string {
	return fmt.Sprintf("the message speaks protocol %d and this build only %d: a newer build must take it", e.Got, e.Speak)
}

// deterministic marshals the same message into the same bytes, whatever
// order its maps were filled in and whoever runs it: golden vectors and
// digests of messages depend on it.
var deterministic = proto.MarshalOptions{Deterministic: true}

// Field numbers of ToReplica's and ToServer's envelope, read before the rest
// of a message is trusted.
const (
	fieldProtocol    protowire.Number = 1
	fieldDown        protowire.Number = 10
	fieldEndSnapshot protowire.Number = 11
	fieldFiled       protowire.Number = 12
)

// EncodeToReplica encodes a message to a replica, deterministically. A zero
// Protocol is encoded as Protocol, without changing m.
//
// The message is checked by the rules DecodeToReplica applies, so that
// what one side sends the other can read: an error wraps ErrMalformed, or
// ErrTooLarge when the bytes would exceed MaxMessageBytes.
func EncodeToReplica(m *syncpb.ToReplica) ([]byte, error) {
	if m == nil {
		return nil, fmt.Errorf("encoding a message to a replica: %w: nil message", ErrMalformed)
	}
	if m.Protocol == 0 {
		m = withProtocol(m)
	}
	if err := checkToReplica(m); err != nil {
		return nil, fmt.Errorf("encoding message %d to a replica: %w", m.Id, err)
	}
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding message %d to a replica: %w", m.Id, err)
	}
	if len(b) > MaxMessageBytes {
		return nil, fmt.Errorf("encoding message %d to a replica: %w: %d bytes, the bound is %d", m.Id, ErrTooLarge, len(b), MaxMessageBytes)
	}
	if _, err := scanMessage(b, true); err != nil {
		return nil, fmt.Errorf("encoding message %d to a replica: %w", m.Id, err)
	}
	return b, nil
}

// DecodeToReplica decodes a message to a replica of at most MaxMessageBytes.
// It is DecodeToReplicaLimit with that bound.
func DecodeToReplica(b []byte) (*syncpb.ToReplica, error) {
	return DecodeToReplicaLimit(b, MaxMessageBytes)
}

// DecodeToReplicaLimit decodes a message to a replica of at most limit
// bytes (MaxMessageBytes when limit is not positive).
//
// It reads the protocol first: above Protocol, the error is a
// *NewerProtocolError and nothing else of the message is looked at. Then it
// checks the envelope: an id above zero; exactly one body; table names
// present; as many upsert keys as upserts; every key, delete, wish and
// answer tuple canonical; a snapshot to end above zero; a lane and a
// sequence above zero in Filed. Any other error wraps ErrMalformed and says
// what is wrong and where.
//
// What it allocates is bounded by the bytes it reads: before anything is
// decoded, a scan of the whole message refuses one that is not valid
// protobuf, that has an empty entry in a list (every entry names a table or
// a column), or that is crowded: that would decode into more than 8 bytes
// for each of its bytes, and 64 KiB besides. Then every list is made at its
// final size and every string and byte field is cut from one of two
// buffers, so a message decodes into that bound, checks included. What it
// returns is what proto.Unmarshal would, unknown fields included.
//
// The tuples in upserts are not checked: a row that does not decode is the
// replica's to leave out, naming it by its key at the same index in
// upsert_keys, while the rest of the message applies. The caller decodes
// each with DecodeTuple.
func DecodeToReplicaLimit(b []byte, limit int) (*syncpb.ToReplica, error) {
	if err := checkEnvelope(b, limit, true); err != nil {
		if _, ok := err.(*NewerProtocolError); ok {
			return nil, err
		}
		return nil, fmt.Errorf("message to a replica: %w", err)
	}
	s, err := scanMessage(b, true)
	if err != nil {
		return nil, fmt.Errorf("message to a replica: %w", err)
	}
	m := newDecoder(s).toReplica(b)
	if err := checkToReplica(m); err != nil {
		return nil, fmt.Errorf("message %d to a replica: %w", m.Id, err)
	}
	return m, nil
}

// EncodeToServer encodes a message to the server, deterministically. A zero
// Protocol is encoded as Protocol, without changing m.
//
// The message is checked by the rules DecodeToServer applies: an error
// wraps ErrMalformed, or ErrTooLarge when the bytes would exceed
// MaxMessageBytes.
func EncodeToServer(m *syncpb.ToServer) ([]byte, error) {
	if m == nil {
		return nil, fmt.Errorf("encoding a message to the server: %w: nil message", ErrMalformed)
	}
	if m.Protocol == 0 {
		m = withProtocol(m)
	}
	if err := checkToServer(m); err != nil {
		return nil, fmt.Errorf("encoding message %d of lane %q to the server: %w", m.Sequence, m.Lane, err)
	}
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding message %d of lane %q to the server: %w", m.Sequence, m.Lane, err)
	}
	if len(b) > MaxMessageBytes {
		return nil, fmt.Errorf("encoding message %d of lane %q to the server: %w: %d bytes, the bound is %d", m.Sequence, m.Lane, ErrTooLarge, len(b), MaxMessageBytes)
	}
	if _, err := scanMessage(b, false); err != nil {
		return nil, fmt.Errorf("encoding message %d of lane %q to the server: %w", m.Sequence, m.Lane, err)
	}
	return b, nil
}

// DecodeToServer decodes a message to the server of at most
// MaxMessageBytes. It is DecodeToServerLimit with that bound.
func DecodeToServer(b []byte) (*syncpb.ToServer, error) {
	return DecodeToServerLimit(b, MaxMessageBytes)
}

// DecodeToServerLimit decodes a message to the server of at most limit
// bytes (MaxMessageBytes when limit is not positive). A server had better
// pass the bound its transport accepts: a message may decode into up to 8
// times its size, and 64 KiB besides.
//
// It reads the protocol first: above Protocol, the error is a
// *NewerProtocolError and nothing else of the message is looked at. Then it
// checks the envelope: a 16-byte replica id, a lane, a sequence above zero,
// one Up; table names present; as many upsert keys as upserts; every key,
// delete and answer tuple canonical; every digest 40 bytes counting the
// rows it claims; every answer in a known state; not crowded (see
// DecodeToReplicaLimit). Any other error wraps ErrMalformed and says what
// is wrong and where.
//
// As in DecodeToReplicaLimit, the tuples in upserts are left to the caller,
// so that one row that does not decode is refused alone.
func DecodeToServerLimit(b []byte, limit int) (*syncpb.ToServer, error) {
	return decodeToServer(b, limit, 0)
}

// decodeToServer is DecodeToServerLimit and DecodeToServerRows: maxRows,
// when positive, bounds the rows of the message.
func decodeToServer(b []byte, limit, maxRows int) (*syncpb.ToServer, error) {
	if err := checkEnvelope(b, limit, false); err != nil {
		if _, ok := err.(*NewerProtocolError); ok {
			return nil, err
		}
		return nil, fmt.Errorf("message to the server: %w", err)
	}
	s, err := scanMessage(b, false)
	if err != nil {
		return nil, fmt.Errorf("message to the server: %w", err)
	}
	if n := s.rows(); maxRows > 0 && n > maxRows {
		return nil, fmt.Errorf("message to the server: %w: it holds %d rows, more than the %d taken in one message", ErrTooManyRows, n, maxRows)
	}
	m := newDecoder(s).toServer(b)
	if err := checkToServer(m); err != nil {
		return nil, fmt.Errorf("message %d of lane %q to the server: %w", m.Sequence, m.Lane, err)
	}
	return m, nil
}

// withProtocol returns a shallow copy of m naming Protocol: the caller's
// message is left as it was, and its rows are not copied.
func withProtocol[M proto.Message](m M) M {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	dst.SetUnknown(src.GetUnknown())
	dst.Set(dst.Descriptor().Fields().ByNumber(fieldProtocol), protoreflect.ValueOfUint32(Protocol))
	return dst.Interface().(M)
}

// checkEnvelope reads the top level of a message without unmarshalling it:
// its size, its protocol, and, for a message to a replica, how many bodies
// it has. It returns a *NewerProtocolError for a newer protocol.
func checkEnvelope(b []byte, limit int, toReplica bool) error {
	if limit <= 0 {
		limit = MaxMessageBytes
	}
	if len(b) > limit {
		return fmt.Errorf("%w: %w: %d bytes, the bound is %d", ErrMalformed, ErrTooLarge, len(b), limit)
	}
	var protocol uint64
	bodies := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: bad field tag: %w", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		if num == fieldProtocol {
			if typ != protowire.VarintType {
				return fmt.Errorf("%w: protocol has wire type %d, not a varint", ErrMalformed, typ)
			}
			protocol, n = protowire.ConsumeVarint(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %w", ErrMalformed, num, protowire.ParseError(n))
		}
		b = b[n:]
		if toReplica && (num == fieldDown || num == fieldEndSnapshot || num == fieldFiled) {
			bodies++
		}
	}
	switch {
	case protocol == 0:
		return fmt.Errorf("%w: no protocol number", ErrMalformed)
	case protocol > uint64(^uint32(0)):
		return fmt.Errorf("%w: protocol %d does not fit 32 bits", ErrMalformed, protocol)
	case protocol > uint64(Protocol):
		return &NewerProtocolError{Got: uint32(protocol), Speak: Protocol}
	case bodies > 1:
		return fmt.Errorf("%w: %d bodies, a message has one", ErrMalformed, bodies)
	}
	return nil
}

// malformed returns an error wrapping ErrMalformed that says what is wrong.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func checkToReplica(m *syncpb.ToReplica) error {
	if m.Protocol == 0 {
		return malformed("no protocol number")
	}
	if m.Id == 0 {
		return malformed("id 0: ids start at 1")
	}
	switch b := m.Body.(type) {
	case nil:
		return malformed("no body")
	case *syncpb.ToReplica_Down:
		if b.Down == nil {
			return malformed("down: nil")
		}
		return checkDown(b.Down)
	case *syncpb.ToReplica_EndSnapshot:
		if b.EndSnapshot == nil {
			return malformed("end_snapshot: nil")
		}
		return checkEndSnapshot(b.EndSnapshot)
	case *syncpb.ToReplica_Filed:
		if b.Filed == nil {
			return malformed("filed: nil")
		}
		return checkFiled(b.Filed)
	}
	return malformed("unknown body %T", m.Body)
}

func checkDown(d *syncpb.Down) error {
	for i, t := range d.Tables {
		if err := checkTableChanges(t); err != nil {
			return fmt.Errorf("down.tables[%d]: %w", i, err)
		}
	}
	for i, w := range d.Wishes {
		if err := checkWish(w); err != nil {
			return fmt.Errorf("down.wishes[%d]: %w", i, err)
		}
	}
	for i, c := range d.Commands {
		if err := checkCommand(c); err != nil {
			return fmt.Errorf("down.commands[%d]: %w", i, err)
		}
	}
	return nil
}

func checkEndSnapshot(e *syncpb.EndSnapshot) error {
	if e.Snapshot == 0 {
		return malformed("end_snapshot: snapshot 0 names no snapshot")
	}
	for i, t := range e.Own {
		if err := checkTableKeys(t); err != nil {
			return fmt.Errorf("end_snapshot.own[%d]: %w", i, err)
		}
	}
	for i, a := range e.Answers {
		if err := checkWishRef(a); err != nil {
			return fmt.Errorf("end_snapshot.answers[%d]: %w", i, err)
		}
	}
	for i, t := range e.Tables {
		if t == "" {
			return fmt.Errorf("end_snapshot.tables[%d]: %w", i, malformed("no table name"))
		}
	}
	return nil
}

func checkFiled(f *syncpb.Filed) error {
	if f.Lane == "" {
		return malformed("filed: no lane")
	}
	if f.Sequence == 0 {
		return malformed("filed: sequence 0: sequences start at 1")
	}
	for i, r := range f.Refused {
		if err := checkRejected(r); err != nil {
			return fmt.Errorf("filed.refused[%d]: %w", i, err)
		}
	}
	return nil
}

func checkToServer(m *syncpb.ToServer) error {
	if m.Protocol == 0 {
		return malformed("no protocol number")
	}
	if len(m.Replica) != 16 {
		return malformed("replica id of %d bytes, not 16", len(m.Replica))
	}
	if m.Lane == "" {
		return malformed("no lane")
	}
	if m.Sequence == 0 {
		return malformed("sequence 0: sequences start at 1")
	}
	if m.Up == nil {
		return malformed("no up")
	}
	return checkUp(m.Up)
}

func checkUp(u *syncpb.Up) error {
	for i, t := range u.Tables {
		if err := checkTableChanges(t); err != nil {
			return fmt.Errorf("up.tables[%d]: %w", i, err)
		}
	}
	for i, r := range u.Rejected {
		if err := checkRejected(r); err != nil {
			return fmt.Errorf("up.rejected[%d]: %w", i, err)
		}
	}
	for i, d := range u.Digests {
		if err := checkDigest(d); err != nil {
			return fmt.Errorf("up.digests[%d]: %w", i, err)
		}
	}
	for i, a := range u.Answers {
		if err := checkAnswer(a); err != nil {
			return fmt.Errorf("up.answers[%d]: %w", i, err)
		}
	}
	for i, a := range u.CommandAnswers {
		if err := checkCommandAnswer(a); err != nil {
			return fmt.Errorf("up.command_answers[%d]: %w", i, err)
		}
	}
	for i, c := range u.Unsent {
		if c.GetTable() == "" {
			return fmt.Errorf("up.unsent[%d]: %w", i, malformed("no table name"))
		}
	}
	for i, d := range u.Undecodable {
		if d.GetMessage() == 0 {
			return fmt.Errorf("up.undecodable[%d]: %w", i, malformed("message 0: ids start at 1"))
		}
	}
	return nil
}

// checkTableChanges checks a table's part, except the tuples of its upserts.
func checkTableChanges(t *syncpb.TableChanges) error {
	if t.GetTable() == "" {
		return malformed("no table name")
	}
	if err := checkColumns(t.Columns); err != nil {
		return fmt.Errorf("%q: %w", t.Table, err)
	}
	if len(t.Upserts) > 0 && len(t.Columns) == 0 {
		return fmt.Errorf("%q: %w", t.Table, malformed("%d upserts and no columns", len(t.Upserts)))
	}
	if len(t.UpsertKeys) != len(t.Upserts) {
		return fmt.Errorf("%q: %w", t.Table, malformed("%d upsert keys for %d upserts", len(t.UpsertKeys), len(t.Upserts)))
	}
	for i, k := range t.UpsertKeys {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("%q: upsert_keys[%d]: %w", t.Table, i, err)
		}
	}
	for i, k := range t.Deletes {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("%q: deletes[%d]: %w", t.Table, i, err)
		}
	}
	return nil
}

func checkTableKeys(t *syncpb.TableKeys) error {
	if t.GetTable() == "" {
		return malformed("no table name")
	}
	for i, k := range t.Keys {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("%q: keys[%d]: %w", t.Table, i, err)
		}
	}
	return nil
}

func checkWish(w *syncpb.Wish) error {
	if w.GetTable() == "" {
		return malformed("no table name")
	}
	if err := checkKey(w.Key); err != nil {
		return fmt.Errorf("%q: key: %w", w.Table, err)
	}
	if err := checkColumns(w.Columns); err != nil {
		return fmt.Errorf("%q: %w", w.Table, err)
	}
	// A withdrawal needs no values; a wish does, one per column.
	if len(w.Wanted) > 0 || !w.Withdrawn {
		n, err := ValidateTuple(w.Wanted)
		if err != nil {
			return fmt.Errorf("%q: wanted: %w", w.Table, err)
		}
		if n != len(w.Columns) || n == 0 {
			return fmt.Errorf("%q: %w", w.Table, malformed("wanted holds %d values for %d columns", n, len(w.Columns)))
		}
	}
	if len(w.BasedOn) > 0 {
		if _, err := ValidateTuple(w.BasedOn); err != nil {
			return fmt.Errorf("%q: based_on: %w", w.Table, err)
		}
	}
	if w.WindowFrom >= minutesPerDay || w.WindowTo >= minutesPerDay {
		return fmt.Errorf("%q: %w", w.Table, malformed("a window of minutes %d to %d: a day has %d", w.WindowFrom, w.WindowTo, minutesPerDay))
	}
	return nil
}

// minutesPerDay bounds a wish's window of the replica's local day.
const minutesPerDay = 24 * 60

func checkWishRef(w *syncpb.WishRef) error {
	if w.GetTable() == "" {
		return malformed("no table name")
	}
	if err := checkKey(w.Key); err != nil {
		return fmt.Errorf("%q: key: %w", w.Table, err)
	}
	return nil
}

// checkRejected checks a rejected row, whose key is there only when it
// could be read.
func checkRejected(r *syncpb.Rejected) error {
	if r.GetTable() == "" {
		return malformed("no table name")
	}
	if len(r.Key) > 0 {
		if err := checkKey(r.Key); err != nil {
			return fmt.Errorf("%q: key: %w", r.Table, err)
		}
	}
	return nil
}

func checkDigest(d *syncpb.Digest) error {
	if d.GetTable() == "" {
		return malformed("no table name")
	}
	s, err := digest.Parse(d.Sum)
	if err != nil {
		return fmt.Errorf("%q: %w", d.Table, malformed("sum of %d bytes, not %d", len(d.Sum), digest.Size))
	}
	if s.Rows() != d.Rows {
		return fmt.Errorf("%q: %w", d.Table, malformed("sum counts %d rows, rows says %d", s.Rows(), d.Rows))
	}
	return nil
}

func checkAnswer(a *syncpb.Answer) error {
	if a.GetTable() == "" {
		return malformed("no table name")
	}
	if err := checkKey(a.Key); err != nil {
		return fmt.Errorf("%q: key: %w", a.Table, err)
	}
	if (a.State < syncpb.WishState_WISH_STATE_PENDING || a.State > syncpb.WishState_WISH_STATE_SUPERSEDED) && a.State != syncpb.WishState_WISH_STATE_EXPIRED {
		return fmt.Errorf("%q: %w", a.Table, malformed("answer in state %d", int32(a.State)))
	}
	return nil
}

// commandIDSize is the length of a command's id: a UUID's.
const commandIDSize = 16

// checkCommand checks a command: its id, and a name unless it is only
// withdrawn.
func checkCommand(c *syncpb.Command) error {
	if len(c.Id) != commandIDSize {
		return malformed("a command id of %d bytes, not %d", len(c.Id), commandIDSize)
	}
	if c.Name == "" && !c.Withdrawn {
		return malformed("a command with no name")
	}
	if c.Deadline < 0 || c.IssuedAt < 0 {
		return malformed("a command's time before 1970")
	}
	return nil
}

// checkCommandAnswer checks a replica's word on a command: its id, and a
// state a replica can say (not queued, which is the server's alone).
func checkCommandAnswer(a *syncpb.CommandAnswer) error {
	if len(a.Id) != commandIDSize {
		return malformed("a command id of %d bytes, not %d", len(a.Id), commandIDSize)
	}
	if a.State < syncpb.CommandState_COMMAND_STATE_DELIVERED || a.State > syncpb.CommandState_COMMAND_STATE_CANCELLED {
		return malformed("a command answer in state %d", int32(a.State))
	}
	return nil
}

// checkKey checks that k is a canonical tuple of at least one value.
func checkKey(k []byte) error {
	n, err := ValidateTuple(k)
	if err != nil {
		return err
	}
	if n == 0 {
		return malformed("a key of no values")
	}
	return nil
}

// checkColumns checks that column names are present, distinct, and no more
// than a tuple can hold. It allocates nothing, however many there are.
func checkColumns(cols []string) error {
	if len(cols) > MaxTupleValues {
		return malformed("%d columns, more than %d", len(cols), MaxTupleValues)
	}
	for i, c := range cols {
		if c == "" {
			return malformed("columns[%d]: no name", i)
		}
	}
	if len(cols) <= 16 {
		for i, c := range cols {
			if slices.Contains(cols[:i], c) {
				return malformed("columns[%d]: %q named twice", i, c)
			}
		}
		return nil
	}
	// Sort their indexes, on the stack, and compare neighbours.
	var order [MaxTupleValues]uint16
	idx := order[:len(cols)]
	for i := range idx {
		idx[i] = uint16(i)
	}
	slices.SortFunc(idx, func(a, b uint16) int {
		if c := strings.Compare(cols[a], cols[b]); c != 0 {
			return c
		}
		return int(a) - int(b)
	})
	twice := -1
	for i := 1; i < len(idx); i++ {
		if cols[idx[i]] == cols[idx[i-1]] && (twice < 0 || int(idx[i]) < twice) {
			twice = int(idx[i])
		}
	}
	if twice >= 0 {
		return malformed("columns[%d]: %q named twice", twice, cols[twice])
	}
	return nil
}
