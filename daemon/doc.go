// Package daemon is a server's and a client's whole life over a runner
// directory, in three calls: a server Listens (taking the directory over
// from the server already there, and its listening sockets with it),
// publishes Ready, serves until Leaving closes and then Closes; a client
// Dials (starting the server when none runs, or when the one that runs is
// older than the client) and gets a connection to a ready server; an
// operator Stops it.
//
//	srv, err := daemon.Listen(ctx, dir, daemon.Options{Program: "idxd", Version: version,
//		Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: "idxd.sock"}}})
//	...
//	go serve(srv.Listeners()[0])
//	srv.Ready(nil)
//	<-srv.Leaving()
//	... finish what is in flight when srv.Reason() is runnerstate.RestartDrain
//	srv.Close()
//
//	conn, rec, err := daemon.Dial(ctx, dir, exec.Command(self, "serve"),
//		daemon.DialOptions{Program: "idxd", Version: version})
//
// # Upgrades clients never see
//
// When a new server takes the directory over from one serving through this
// package, the old one's listening sockets pass to the new one (on Linux
// and macOS, with SCM_RIGHTS, to the starters waiting in the takeover gate,
// which each listen on a rendezvous; docs/protocol.md specifies it). From
// the instant the old server's Leaving closes it accepts nothing; the new
// one accepts nothing before it is admitted, which is after the old one
// let the directory go; a client that connects in between waits in the
// socket's backlog and is accepted by the new server. So two servers never
// serve at once, and no client is refused while the backlog does not
// overflow (a full unix socket backlog answers EAGAIN at once; a full TCP
// one drops the SYN, and the client's kernel retries). The window a client
// waits in is the old server's drain, its Close and exit, and the new
// one's admission: exit promptly after Close.
//
// Elsewhere (Windows) the new server binds anew once the old one has
// closed: a client can be refused in between, and Dial tries again while
// the record shows the server going or starting.
//
// A server killed, or one that serves without this package, hands nothing
// over: the next server binds anew, replacing a unix socket file whose
// dial is refused. A killed server's children that inherited its listening
// socket keep the path alive, and the next server is refused until they
// exit.
//
// # Versions without ping-pong
//
// Versions compare as semantic versions. A client whose Version is newer
// than the ready server's replaces it (once); a client that is older uses
// the newer server, or gets ErrIncompatible from its Accept. A server that
// Dial started steps aside for a holder (not leaving) or waiting starter of
// the same Program with the same or a newer Version, so an old client never
// bounces a new server that a deploy is bringing up, nor a client a deploy
// of its own version (a restart to apply new flags). A server started any other way (a deploy, a
// rollback) takes over whatever the versions.
package daemon
