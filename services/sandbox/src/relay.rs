//! The relay that gives a sandboxed command its only way out. A command with network
//! keeps a network namespace of its own (nothing but loopback), so it cannot reach any
//! address directly; inside it this relay listens on loopback and passes every
//! connection, byte for byte, to the egress proxy's Unix socket bound into the sandbox
//! (`baton_egress::proxy`), which admits or refuses each destination under the egress
//! policy. The command finds it through `HTTP_PROXY`/`HTTPS_PROXY`.
//!
//! The relay is the sandbox's first process: it starts the command, and exits with the
//! command's status once the command ends (taking the namespace, and any connection still
//! open, with it). It is plain threads and blocking I/O: a handful of connections, in a
//! process counted against the sandbox's process limit.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::Command;

/// The loopback port the relay listens on inside the sandbox.
pub const PORT: u16 = 3128;

/// Where the proxy's socket is bound inside the sandbox.
pub const SOCKET: &str = "/run/baton/egress.sock";

/// Runs the relay: `args` are `<unix socket> -- <command and its arguments>`. Returns
/// the command's exit status (128 + the signal that killed it), or 127 when the relay
/// could not start it.
pub fn main(args: &[String]) -> i32 {
    let (socket, command) = match args {
        [socket, dash, command @ ..] if dash == "--" && !command.is_empty() => (socket, command),
        _ => {
            eprintln!("usage: sandbox-relay <unix socket> -- <command> [arguments]");
            return 127;
        }
    };
    let listener = match TcpListener::bind(("127.0.0.1", PORT)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("sandbox-relay: cannot listen on 127.0.0.1:{PORT}: {e}");
            return 127;
        }
    };
    let socket = socket.clone();
    std::thread::spawn(move || accept(listener, &socket));
    let status = match Command::new(&command[0]).args(&command[1..]).status() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sandbox-relay: cannot start {}: {e}", command[0]);
            return 127;
        }
    };
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn accept(listener: TcpListener, socket: &str) {
    for client in listener.incoming().flatten() {
        let socket = socket.to_string();
        std::thread::spawn(move || {
            if let Ok(proxy) = UnixStream::connect(&socket) {
                let _ = splice(client, proxy);
            }
        });
    }
}

/// Copies both ways until either side ends.
fn splice(client: TcpStream, proxy: UnixStream) -> io::Result<()> {
    let (mut client_in, mut proxy_out) = (client.try_clone()?, proxy.try_clone()?);
    let upstream = std::thread::spawn(move || {
        let _ = io::copy(&mut client_in, &mut proxy_out);
        let _ = proxy_out.shutdown(std::net::Shutdown::Write);
    });
    let (mut proxy_in, mut client_out) = (proxy, client);
    let _ = io::copy(&mut proxy_in, &mut client_out);
    let _ = client_out.shutdown(std::net::Shutdown::Write);
    let _ = upstream.join();
    Ok(())
}
