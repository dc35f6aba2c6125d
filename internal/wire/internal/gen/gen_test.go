// This file holds the generator's tests: what it refuses. That what it
// writes for sync.proto is current, and decodes as proto.Unmarshal does, is
// tested in package wire.

package gen

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestBuildersRefuseShapesBeyondTheDecoder checks that a field the
// decoder's scan would not handle either is an error naming it, not code
// that decodes it wrong.
func TestBuildersRefuseShapesBeyondTheDecoder(t *testing.T) {
	optional, repeated := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL, descriptorpb.FieldDescriptorProto_LABEL_REPEATED
	for _, c := range []struct {
		name  string
		label descriptorpb.FieldDescriptorProto_Label
		typ   descriptorpb.FieldDescriptorProto_Type
		want  string
	}{
		{"ratio", optional, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, "field ratio is of kind double"},
		{"counts", repeated, descriptorpb.FieldDescriptorProto_TYPE_INT64, "field counts is a repeated int64"},
		{"fixed", optional, descriptorpb.FieldDescriptorProto_TYPE_FIXED32, "field fixed is of kind fixed32"},
	} {
		fdp := &descriptorpb.FileDescriptorProto{
			Name:    proto.String("test.proto"),
			Package: proto.String("test"),
			Syntax:  proto.String("proto3"),
			Options: &descriptorpb.FileOptions{GoPackage: proto.String("example.com/testpb")},
			MessageType: []*descriptorpb.DescriptorProto{{
				Name: proto.String("M"),
				Field: []*descriptorpb.FieldDescriptorProto{
					{Name: proto.String("table"), Number: proto.Int32(1), Label: optional.Enum(), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()},
					{Name: proto.String(c.name), Number: proto.Int32(2), Label: c.label.Enum(), Type: c.typ.Enum()},
				},
			}},
		}
		fd, err := protodesc.NewFile(fdp, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Builders(fd.Messages().Get(0))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// TestSourceIsGo checks that what is generated for sync.proto formats, and
// holds a builder for each message that ToReplica and ToServer reach.
func TestSourceIsGo(t *testing.T) {
	src, err := Source()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"toReplica", "down", "tableChanges", "wish", "endSnapshot", "tableKeys", "wishRef", "filed",
		"rejected", "toServer", "up", "digest", "answer", "count"} {
		if !strings.Contains(string(src), "func (d *decoder) "+m+"(b []byte)") {
			t.Errorf("no builder %s", m)
		}
	}
}
