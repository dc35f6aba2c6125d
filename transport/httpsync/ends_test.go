package httpsync

import (
	"github.com/magicsync/magicsync/transport/httpsync/headoffice"
	"github.com/magicsync/magicsync/transport/httpsync/internal/httpwire"
)

// The tests of this package exercise both ends of the protocol: the
// client, and the head office's handler (package headoffice) it talks to,
// over a fake engine or a real server. These are the handler's names, as
// the tests use them; the tests that need the handler's insides are
// package headoffice's.
type (
	Engine         = headoffice.Engine
	SchemaEngine   = headoffice.SchemaEngine
	Applied        = headoffice.Applied
	Classifier     = headoffice.Classifier
	HandlerOptions = headoffice.HandlerOptions
)

var (
	NewHandler      = headoffice.NewHandler
	ForServer       = headoffice.ForServer
	DefaultClassify = headoffice.DefaultClassify
)

// maxReasonLen bounds the reason of a refusal, as both ends shorten it.
const maxReasonLen = httpwire.MaxReasonLen
