package pgtest

import (
	"context"
	"os"
)

// Origin says which of the servers in the package's order of search (see
// the package documentation) a search settled on.
type Origin int

const (
	// OriginDatabaseURL is the server $DATABASE_URL names.
	OriginDatabaseURL Origin = iota + 1
	// OriginLocal is the local server at 127.0.0.1:5432.
	OriginLocal
	// OriginCluster is a private cluster kept in a directory the caller
	// named, between runs.
	OriginCluster
	// OriginThrowaway is a private cluster in a temporary directory, run
	// with fsync, synchronous_commit and full_page_writes off and removed
	// when stopped: fast, and not durable.
	OriginThrowaway
	// OriginLogicalCluster is a private cluster started with
	// wal_level=logical by [EnsureLogical], durable (fsync,
	// synchronous_commit and full_page_writes on) whether it is kept in a
	// directory the caller named or in a temporary one removed when
	// stopped.
	OriginLogicalCluster
)

// String names the origin in plain words.
func (o Origin) String() string {
	switch o {
	case OriginDatabaseURL:
		return "the server named by $DATABASE_URL"
	case OriginLocal:
		return "the local server at 127.0.0.1:5432"
	case OriginCluster:
		return "a private cluster kept between runs"
	case OriginThrowaway:
		return "a throwaway cluster in a temporary directory"
	case OriginLogicalCluster:
		return "a private cluster with wal_level=logical, its commits durable"
	}
	return "an unknown server"
}

// EnsureOrigin is [Ensure], saying also which server it settled on: a
// program that reports figures measured against the server says which.
func EnsureOrigin(ctx context.Context, dataDir string, logf func(format string, args ...any)) (url string, origin Origin, stop func() error, err error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	f, err := find(ctx, config{dir: dataDir, logf: logf, getenv: os.Getenv, localURL: localServerURL})
	if err != nil {
		return "", 0, nil, err
	}
	return f.url, f.origin, f.stop, nil
}
