// Package daemon is a server's and a client's whole life over a runner
// directory, in three calls: a server Listens (taking the directory over from
// the server already there, and its listening sockets with it), publishes
// Ready, serves until Leaving closes and then Closes; a client Dials (starting
// the server when none runs, or when the one that runs is older than the
// client) and gets a connection to a ready server; an operator Stops it.
//
//	srv, err := daemon.Listen(ctx, dir, daemon.Options{Program: "idxd", Version: version,
//		Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: "idxd.sock"}}})
//	...
//	go serve(srv.Listeners()[0])
//	srv.Ready(nil); <-srv.Leaving()
//	... finish what is in flight when srv.Reason() is runnerstate.RestartDrain
//	srv.Close()
//
//	conn, rec, err := daemon.Dial(ctx, dir, exec.Command(self, "serve"),
//		daemon.DialOptions{Program: "idxd", Version: version})
//
// # Upgrades and versions
//
// A leaving server stops accepting and hands its listening sockets to the
// server taking over (Linux and macOS; Windows binds anew), so two servers
// never serve at once and no client is refused while the backlog holds.
// Versions compare as semantic versions: a client newer than the ready
// server replaces it once, an older one uses the newer server (or gets
// ErrIncompatible), and a server Dial started steps aside for one of its
// Program at the same or a newer Version, so versions never ping-pong.
// Dial checks who accepts (ErrUntrustedPeer) over a unix socket on Linux and
// macOS, and over TCP on Linux only: elsewhere it does not. docs/guarantees.md,
// docs/protocol.md and docs/operations.md say more.
package daemon
