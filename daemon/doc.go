// Package daemon is a server's and a client's whole life over a runner
// directory, in three calls: a server Listens (taking the directory over from
// the server already there, and its listening sockets with it), publishes
// Ready, serves until Leaving closes and then Closes; a client Dials (starting
// the server when none runs, or when the one that runs is older than the
// client) and gets a connection to a ready server; an operator Stops it.
//
//	srv, err := daemon.Listen(ctx, dir, daemon.Options{Program: "idxd", Version: version,
//		Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: "idxd.sock"}}})
//	defer srv.Close() // after err's check
//	srv.Ready(nil)
//	daemon.ServeHTTP(ctx, srv, &http.Server{Handler: h}) // or Accept until Leaving, then answer
//
//	conn, rec, err := daemon.Dial(ctx, dir, exec.Command(self, "serve"),
//		daemon.DialOptions{Program: "idxd", Version: version})
//
// Every connection Accept returned is the leaving server's to answer: unless
// Reason is RestartNow or RestartLost, serve each (its first request too,
// even one not sent yet) before Close. http.Server.Shutdown alone drops those
// whose request it has not read; ServeHTTP does not. New clients wait in the
// backlog for the successor, and are never refused.
//
// A leaving server hands its listening sockets over (Linux and macOS;
// Windows binds anew), so two servers never accept at once; with
// Options.Linger it finishes its long-lived connections beside its
// successor, which accepts the new ones at once. Versions never ping-pong
// (see Dial). Dial checks who accepts (ErrUntrustedPeer) over a unix socket
// on Linux and macOS, and over TCP on Linux only. Listen, Dial, Stop and
// ServeHTTP end with their context whatever others hold. More:
// docs/operations.md ("A daemon of your own").
package daemon
