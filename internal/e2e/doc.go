// Package e2e holds the end-to-end tests of the engines together: a real
// PostgreSQL, several real SQLite replicas, and an in-process transport
// that can be unplugged, lose, duplicate and reorder messages.
package e2e
