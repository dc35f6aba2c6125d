// Package syncpb holds the Go types of the protocol's messages, generated
// from proto/sync.proto by protoc and protoc-gen-go (the versions the
// header of sync.pb.go names). After a change of sync.proto, run
//
//	go generate ./internal/wire/syncpb ./internal/wire
//
// from the module's root, with protoc and protoc-gen-go on the PATH
// (protoc-gen-go: go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12),
// then rewrite the golden vectors (PROTOCOL.md, section 15).
package syncpb

//go:generate protoc --proto_path=../../.. --go_out=../../.. --go_opt=module=github.com/magicsync/magicsync proto/sync.proto
