// Package embedded starts a NATS server inside the process
// (github.com/nats-io/nats-server/v2 as a library), so that tests, the demo
// and a small head office need nothing installed: on a free loopback port
// unless told otherwise, with a maximum payload large enough for the
// engine's messages. It serves as a hub that leaf nodes join, and as a
// shop's leaf node joining a hub.
//
// A host that runs its own NATS servers does not need this package:
// natssync.Connect takes any server's URL.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/magicsync/magicsync/transport/natssync"
)

// DefaultMaxPayload is the largest message the server takes unless
// Options.MaxPayload says otherwise: 8 MiB, room for the engine's default
// 1 MiB messages (server.Options.MaxMessageBytes) and their headers.
const DefaultMaxPayload = 8 << 20

// User is one NATS user of the server.
type User struct {
	// Name and Password are what the user connects with
	// (nats.UserInfo).
	Name, Password string
	// Permissions restricts what the user may publish and subscribe to;
	// nil allows everything (a head office's user).
	// natssync.ReplicaPermissions gives a replica's.
	Permissions *natssync.Permissions
}

// Options say how to start the server. The zero value is a server on a
// free loopback port, without leaf nodes or users.
type Options struct {
	// Name names the server in its logs and to its peers.
	Name string
	// Host and Port are where clients connect. Empty means 127.0.0.1; zero
	// a free port.
	Host string
	Port int
	// MaxPayload bounds a message and its headers. Zero means
	// DefaultMaxPayload.
	MaxPayload int32
	// LeafListen, when true, has the server take leaf nodes (a hub) on
	// LeafPort, zero meaning a free port.
	LeafListen bool
	LeafPort   int
	// LeafNoAdvertise, on a hub, keeps its leaf address to itself: a hub
	// otherwise tells the leaf nodes that join it where it takes leaf
	// nodes, and they reconnect there rather than through the URL they
	// were given — around a proxy, a tunnel or a NAT in between.
	LeafNoAdvertise bool
	// Hubs are the URLs ("nats-leaf://host:port") of the hubs this server
	// joins as a leaf node. It reconnects every LeafReconnect (zero means
	// one second) while a hub is out of reach.
	Hubs          []string
	LeafReconnect time.Duration
	// Users, when any, are the only ones the server lets in.
	Users []User
	// Logs, when true, has the server log to standard error.
	Logs bool
}

// Server is a NATS server running in the process.
type Server struct {
	ns       *server.Server
	leafPort int
}

// Start starts a NATS server and returns once it takes connections.
func Start(opts Options) (*Server, error) {
	so := &server.Options{
		ServerName: opts.Name,
		Host:       opts.Host,
		Port:       opts.Port,
		MaxPayload: opts.MaxPayload,
		NoLog:      !opts.Logs,
		NoSigs:     true,
	}
	if so.Host == "" {
		so.Host = "127.0.0.1"
	}
	if so.Port == 0 {
		so.Port = server.RANDOM_PORT
	}
	if so.MaxPayload <= 0 {
		so.MaxPayload = DefaultMaxPayload
	}
	s := &Server{}
	if opts.LeafListen {
		port := opts.LeafPort
		if port == 0 {
			p, err := freePort(so.Host)
			if err != nil {
				return nil, err
			}
			port = p
		}
		so.LeafNode.Host, so.LeafNode.Port = so.Host, port
		so.LeafNode.NoAdvertise = opts.LeafNoAdvertise
		s.leafPort = port
	}
	for _, hub := range opts.Hubs {
		u, err := url.Parse(hub)
		if err != nil {
			return nil, fmt.Errorf("magicsync/natssync/embedded: hub %q: %w", hub, err)
		}
		so.LeafNode.Remotes = append(so.LeafNode.Remotes, &server.RemoteLeafOpts{URLs: []*url.URL{u}})
	}
	if len(opts.Hubs) > 0 {
		so.LeafNode.ReconnectInterval = opts.LeafReconnect
		if so.LeafNode.ReconnectInterval <= 0 {
			so.LeafNode.ReconnectInterval = time.Second
		}
	}
	for _, u := range opts.Users {
		user := &server.User{Username: u.Name, Password: u.Password}
		if p := u.Permissions; p != nil {
			user.Permissions = &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: p.Publish},
				Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
			}
		}
		so.Users = append(so.Users, user)
	}
	ns, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("magicsync/natssync/embedded: %w", err)
	}
	if opts.Logs {
		ns.ConfigureLogger()
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("magicsync/natssync/embedded: the NATS server did not start within 10 s")
	}
	s.ns = ns
	return s, nil
}

// URL is where clients connect: "nats://127.0.0.1:<port>".
func (s *Server) URL() string { return s.ns.ClientURL() }

// LeafURL is where leaf nodes join this hub ("nats-leaf://host:port"), or
// "" when it takes none.
func (s *Server) LeafURL() string {
	if s.leafPort == 0 {
		return ""
	}
	host, _, _ := net.SplitHostPort(s.ns.Addr().String())
	return "nats-leaf://" + net.JoinHostPort(host, strconv.Itoa(s.leafPort))
}

// LeafNodes is how many leaf nodes are connected to this server (on a
// leaf, how many hubs it is joined to).
func (s *Server) LeafNodes() int { return s.ns.NumLeafNodes() }

// Shutdown stops the server and waits until it has.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// freePort returns a TCP port free on host just now.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("magicsync/natssync/embedded: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Clients is the number of client connections the server holds now.
func (s *Server) Clients() int { return s.ns.NumClients() }
