// This file holds the decoder's scan, which bounds what a message decodes
// into before anything is allocated for it, and the pieces the generated
// builders of decode_gen.go cut a scanned message's fields with.

//go:generate go run ./internal/gen/wiregen -o decode_gen.go

package wire

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// Decoding builds what proto.Unmarshal would build from a message, unknown
// fields included, but only after a scan of the whole message, which
// allocates nothing, has shown that
//
//   - the bytes are valid protobuf, every string valid UTF-8;
//   - no entry of a repeated message field is empty: every one of them
//     needs a table name, so an empty one is refused anyway;
//   - no singular message field (ToServer's up) appears twice;
//   - its weight — what it decodes into, by the protocol's crowded rule
//     (messageWeight and the weights of list entries, PROTOCOL.md section
//     1), which counts every struct, slice entry and byte the decoder will
//     allocate — is at most maxDecodedPerByte bytes for each byte of the
//     message, and decodedSlack besides.
//
// Then every slice is made once at its final size, and every string and
// byte field is a piece of one of two buffers the scan sized. A message
// crowded with tiny entries (16 MiB of empty rejections made proto.Unmarshal
// allocate 1.2 GiB) is refused before anything is allocated for it, and a
// message that is not costs no more than its bound.

const (
	// maxDecodedPerByte bounds the bytes a message decodes into for each of
	// its bytes. Messages with real rows take under half of it; only one
	// crowded with entries that carry next to nothing comes near.
	maxDecodedPerByte = 8
	// decodedSlack is what any message may decode into besides, so that a
	// small message is never refused for its handful of table parts.
	decodedSlack = 64 << 10
)

// maxField bounds the field numbers the decoder knows.
const maxField = 16

// fieldInfo is what the scan and the decoder know of one field.
type fieldInfo struct {
	name string
	wire protowire.Type // the wire type the field must have to be known
	list bool           // repeated
	text bool           // a string: UTF-8, its bytes in the text buffer
	msg  *msgInfo       // a message field's message
	elem int            // what one entry of a list weighs (the crowded rule)
	idx  int            // the field's index among all lists, for counting
	// packed marks a repeated varint: packed (one length-delimited field
	// holding the varints) or not (one varint field per entry), as
	// proto.Unmarshal reads either.
	packed bool
}

// where names the field in an error, with the index of its entry i.
func (f *fieldInfo) where(i int) string {
	if f.list {
		return fmt.Sprintf("%s[%d]", f.name, i)
	}
	return f.name
}

// msgInfo is what the scan and the decoder know of one message.
type msgInfo struct {
	name   string
	size   int // bytes of its Go struct
	weight int // what it weighs for the crowded rule (messageWeight)
	fields [maxField + 1]*fieldInfo
}

// messageWeight is what one message of each type weighs for the crowded
// rule, as PROTOCOL.md (section 1) lists it: the bytes its Go struct
// takes once allocated, fixed here as the protocol's constants so that a
// replica in another language counts as the Go engines do.
// TestMessageWeightsCoverTheGoStructs checks them against the structs.
var messageWeight = map[string]int{
	"to_replica": 96, "to_server": 112, "down": 128, "up": 288, "table_changes": 160,
	"end_snapshot": 128, "table_keys": 80, "filed": 112, "rejected": 112, "digest": 96,
	"count": 64, "wish": 208, "wish_ref": 96, "answer": 128, "undecodable": 64,
	"command": 144, "command_answer": 128,
}

// What one entry of a list weighs for the crowded rule: a number, a
// string, a byte string, a message (besides the message's own weight).
const (
	numberEntryWeight  = 8
	stringEntryWeight  = 16
	bytesEntryWeight   = 24
	messageEntryWeight = 8
)

// known returns the field num of type typ, or nil: a field of an unknown
// number, or of a known number with another wire type, is kept as unknown,
// as proto.Unmarshal does.
func (mi *msgInfo) known(num protowire.Number, typ protowire.Type) *fieldInfo {
	if num > maxField {
		return nil
	}
	if f := mi.fields[num]; f != nil && (f.wire == typ || f.packed && typ == protowire.VarintType) {
		return f
	}
	return nil
}

var (
	toReplicaInfo, toServerInfo *msgInfo
	// lists names every repeated field, by index, for errors.
	lists []string
)

func init() {
	seen := map[protoreflect.FullName]*msgInfo{}
	toReplicaInfo = infoOf((*syncpb.ToReplica)(nil).ProtoReflect().Descriptor(), seen)
	toServerInfo = infoOf((*syncpb.ToServer)(nil).ProtoReflect().Descriptor(), seen)
	if len(lists) > len(scanned{}.entries) {
		panic("wire: more repeated fields than the scan counts")
	}
}

// infoOf describes md from its descriptor and its Go type. It panics on a
// shape the decoder does not handle, so that changing sync.proto that way
// fails every test at once.
func infoOf(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]*msgInfo) *msgInfo {
	if mi := seen[md.FullName()]; mi != nil {
		return mi
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		panic(err)
	}
	mi := &msgInfo{name: snake(string(md.Name())), size: int(reflect.TypeOf(mt.Zero().Interface()).Elem().Size())}
	w, ok := messageWeight[mi.name]
	if !ok {
		panic(fmt.Sprintf("wire: message %s has no weight for the crowded rule: add it to messageWeight and PROTOCOL.md", mi.name))
	}
	mi.weight = w
	seen[md.FullName()] = mi
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if fd.Number() > maxField || fd.IsMap() {
			panic(fmt.Sprintf("wire: %s: field %s is beyond the decoder", md.FullName(), fd.Name()))
		}
		f := &fieldInfo{name: string(fd.Name()), list: fd.IsList(), idx: -1}
		switch fd.Kind() {
		case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Int64Kind,
			protoreflect.Uint32Kind, protoreflect.Uint64Kind:
			f.wire = protowire.VarintType
			if f.list {
				if fd.Kind() != protoreflect.Uint64Kind {
					panic(fmt.Sprintf("wire: %s: repeated scalar %s is beyond the decoder", md.FullName(), fd.Name()))
				}
				f.wire, f.packed, f.elem = protowire.BytesType, true, numberEntryWeight
			}
		case protoreflect.StringKind:
			f.wire, f.text, f.elem = protowire.BytesType, true, stringEntryWeight
		case protoreflect.BytesKind:
			f.wire, f.elem = protowire.BytesType, bytesEntryWeight
		case protoreflect.MessageKind:
			f.wire, f.elem = protowire.BytesType, messageEntryWeight
			f.msg = infoOf(fd.Message(), seen)
		default:
			panic(fmt.Sprintf("wire: %s: field %s of kind %v is beyond the decoder", md.FullName(), fd.Name(), fd.Kind()))
		}
		if f.list {
			f.idx = len(lists)
			lists = append(lists, snake(string(md.Name()))+"."+f.name)
		}
		mi.fields[fd.Number()] = f
	}
	return mi
}

// snake spells a message's name as its field is spelled: EndSnapshot,
// end_snapshot.
func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if 'A' <= r && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// scanned is what a scan found a message decodes into.
type scanned struct {
	size    int // the message's bytes
	structs int // weight of messages and list entries
	bytes   int // bytes of bytes fields and unknown fields
	text    int // bytes of strings
	entries [32]int
}

// total is the message's weight by the crowded rule: what it decodes into.
func (s *scanned) total() int {
	return s.structs + s.bytes + s.text
}

// pathError is an error found at path inside a message.
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

// within says that err was found in the field named name.
func within(name string, err error) error {
	var pe *pathError
	if errors.As(err, &pe) {
		pe.path = name + "." + pe.path
		return pe
	}
	return &pathError{path: name, err: err}
}

// scanMessage scans a whole message, whose envelope was checked, and
// refuses it if it decodes into more than its bound.
func scanMessage(b []byte, toReplica bool) (*scanned, error) {
	mi := toServerInfo
	if toReplica {
		mi = toReplicaInfo
	}
	s := &scanned{size: len(b)}
	if err := s.message(b, mi); err != nil {
		return nil, err
	}
	if total, bound := s.total(), maxDecodedPerByte*len(b)+decodedSlack; total > bound {
		most := 0
		for i, n := range s.entries {
			if n > s.entries[most] {
				most = i
			}
		}
		return nil, malformed("crowded: its %d bytes would decode into %d, more than %d; it holds %d entries of %s",
			len(b), total, bound, s.entries[most], lists[most])
	}
	return s, nil
}

// message scans one message of type mi, adding up what it decodes into.
func (s *scanned) message(b []byte, mi *msgInfo) error {
	s.structs += mi.weight
	var counts [maxField + 1]int
	var once [maxField + 1]bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed("bad field tag: %v", protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return malformed("field number %d is above the highest, %d", num, protowire.MaxValidNumber)
		}
		b = b[n:]
		f := mi.known(num, typ)
		if f == nil {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return malformed("field %d: %v", num, protowire.ParseError(n))
			}
			s.bytes += protowire.SizeTag(num) + n
			b = b[n:]
			continue
		}
		var v []byte
		if typ == protowire.VarintType {
			_, n = protowire.ConsumeVarint(b)
		} else {
			v, n = protowire.ConsumeBytes(b)
		}
		if n < 0 {
			return within(f.where(counts[num]), malformed("%v", protowire.ParseError(n)))
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType:
		case f.packed:
			k, err := packedCount(v)
			if err != nil {
				return within(f.where(counts[num]), err)
			}
			counts[num] += k
			continue
		case f.msg != nil && f.list && len(v) == 0:
			// Every entry of a list of messages names its table (or, an
			// undecodable message, its id).
			if t := f.msg.fields[1]; t == nil || t.name != "table" {
				return within(f.where(counts[num]), malformed("an empty entry"))
			}
			return within(f.where(counts[num]), malformed("no table name"))
		case f.msg != nil:
			if !f.list {
				if once[num] {
					return malformed("%s twice", f.name)
				}
				once[num] = true
			}
			if err := s.message(v, f.msg); err != nil {
				return within(f.where(counts[num]), err)
			}
		case f.text && f.list && len(v) == 0:
			// Column and table names are never empty.
			return within(f.where(counts[num]), malformed("no name"))
		case f.text:
			if !utf8.Valid(v) {
				return within(f.where(counts[num]), malformed("not UTF-8"))
			}
			s.text += len(v)
		default:
			s.bytes += len(v)
		}
		counts[num]++
	}
	for num, c := range counts {
		if f := mi.fields[num]; c > 0 && f.list {
			s.structs += c * f.elem
			s.entries[f.idx] += c
		}
	}
	return nil
}

// packedCount counts the varints of a packed repeated field, checking
// that v holds nothing else.
func packedCount(v []byte) (int, error) {
	k := 0
	for len(v) > 0 {
		_, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return 0, malformed("%v", protowire.ParseError(n))
		}
		v = v[n:]
		k++
	}
	return k, nil
}

// appendPacked appends the varints of a scanned field of a repeated
// varint, packed or not.
func appendPacked(list []uint64, f field) []uint64 {
	if f.typ == protowire.VarintType {
		return append(list, f.v)
	}
	for v := f.b; len(v) > 0; {
		x, n := protowire.ConsumeVarint(v)
		list = append(list, x)
		v = v[n:]
	}
	return list
}

// decoder builds a scanned message, every piece of it sized in advance. Its
// builders, one method per message (toReplica, toServer, down, …), are
// generated from sync.proto's descriptors into decode_gen.go.
type decoder struct {
	bytes []byte          // bytes fields and unknown fields, filled in order
	text  strings.Builder // strings
}

func newDecoder(s *scanned) *decoder {
	d := &decoder{bytes: make([]byte, 0, s.bytes)}
	d.text.Grow(s.text)
	return d
}

// noBytes is an empty entry of a list of bytes: not nil, as proto.Unmarshal
// makes it.
var noBytes = []byte{}

// entry copies an entry of a list of bytes.
func (d *decoder) entry(v []byte) []byte {
	if len(v) == 0 {
		return noBytes
	}
	return d.take(v)
}

// single copies a bytes field: nil when empty, as proto.Unmarshal makes it.
func (d *decoder) single(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return d.take(v)
}

func (d *decoder) take(v []byte) []byte {
	off := len(d.bytes)
	d.bytes = append(d.bytes, v...)
	return d.bytes[off:len(d.bytes):len(d.bytes)]
}

func (d *decoder) str(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	d.text.Write(v)
	s := d.text.String()
	return s[len(s)-len(v):]
}

// field is one field of a scanned message.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64 // a varint's value
	b   []byte // a length-delimited field's content
	raw []byte // the value's bytes as they came
}

// next reads the first field of b, a scanned message.
func next(b []byte) (field, []byte) {
	num, typ, n := protowire.ConsumeTag(b)
	b = b[n:]
	f := field{num: num, typ: typ}
	switch typ {
	case protowire.VarintType:
		f.v, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		f.b, n = protowire.ConsumeBytes(b)
	default:
		n = protowire.ConsumeFieldValue(num, typ, b)
	}
	f.raw = b[:n]
	return f, b[n:]
}

// size is the bytes f takes as an unknown field: its tag and its value.
func (f *field) size() int { return protowire.SizeTag(f.num) + len(f.raw) }

// varints counts the entries of a repeated varint in f, packed or not.
func (f *field) varints() int {
	if f.typ == protowire.VarintType {
		return 1
	}
	n, _ := packedCount(f.b) // scanned: it counts
	return n
}

// reserve sets aside size bytes of the bytes buffer for a message's unknown
// fields, and returns them as an empty slice to append to.
func (d *decoder) reserve(size int) []byte {
	off := len(d.bytes)
	d.bytes = d.bytes[:off+size]
	return d.bytes[off : off : off+size]
}

// appendUnknown appends f to unknown as proto.Unmarshal keeps it.
func appendUnknown(unknown []byte, f field) []byte {
	return append(protowire.AppendTag(unknown, f.num, f.typ), f.raw...)
}

// setUnknown sets the unknown fields of m, when there are any.
func setUnknown(m protoreflect.ProtoMessage, unknown []byte) {
	if len(unknown) > 0 {
		m.ProtoReflect().SetUnknown(unknown)
	}
}

// makeList makes an empty list of room for n entries: nil when n is 0, as
// proto.Unmarshal leaves a list it saw no entry of.
func makeList[T any](n int) []T {
	if n == 0 {
		return nil
	}
	return make([]T, 0, n)
}
