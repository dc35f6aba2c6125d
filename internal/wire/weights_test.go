package wire

import (
	"reflect"
	"slices"
	"testing"

	"github.com/magicsync/magicsync/internal/wire/syncpb"
)

// sizeClasses are the sizes Go's allocator rounds a small object up to
// (internal/runtime/gc's SizeClassToSize, stable for years; a change
// shows in TestDecodersAllocateWithinABoundOfTheInput).
var sizeClasses = [...]int{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// allocated is what Go's allocator takes for an object of n bytes: a small
// one is rounded up to its size class, a large one to whole 8 KiB pages.
func allocated(n int) int {
	if n == 0 {
		return 0
	}
	if i, _ := slices.BinarySearch(sizeClasses[:], n); i < len(sizeClasses) {
		return sizeClasses[i]
	}
	const page = 8 << 10
	return (n + page - 1) / page * page
}

// The crowded rule's weights (PROTOCOL.md, section 1) are constants of
// the protocol; they must cover what Go's decoder allocates, or the bound
// on a message's memory would not hold: every message weighs at least its
// struct once allocated, every list entry at least its Go slot.
func TestMessageWeightsCoverTheGoStructs(t *testing.T) {
	seen := map[*msgInfo]bool{}
	var walk func(mi *msgInfo)
	walk = func(mi *msgInfo) {
		if seen[mi] {
			return
		}
		seen[mi] = true
		if got := allocated(mi.size); mi.weight < got {
			t.Errorf("%s weighs %d for the crowded rule; its Go struct takes %d", mi.name, mi.weight, got)
		}
		for _, f := range mi.fields {
			if f == nil {
				continue
			}
			if f.msg != nil {
				walk(f.msg)
			}
		}
	}
	walk(toReplicaInfo)
	walk(toServerInfo)
	if len(seen) != len(messageWeight) {
		t.Errorf("%d messages weighed, %d reachable from ToReplica and ToServer", len(messageWeight), len(seen))
	}
	for _, c := range []struct {
		name   string
		weight int
		typ    reflect.Type
	}{
		{"number", numberEntryWeight, reflect.TypeFor[uint64]()},
		{"string", stringEntryWeight, reflect.TypeFor[string]()},
		{"bytes", bytesEntryWeight, reflect.TypeFor[[]byte]()},
		{"message", messageEntryWeight, reflect.TypeFor[*syncpb.Up]()},
	} {
		if int(c.typ.Size()) > c.weight {
			t.Errorf("a %s entry weighs %d; Go's slot takes %d", c.name, c.weight, c.typ.Size())
		}
	}
}
