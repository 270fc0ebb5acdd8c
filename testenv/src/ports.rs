//! Free loopback ports.
//!
//! Bind `127.0.0.1:0`, read the port, close it and hand it to a component
//! (envtest's approach). Ports handed out by this process are remembered so
//! that two components never get the same one; the remaining race with other
//! processes is handled by retrying the whole start once.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::{Mutex, OnceLock};

use crate::Error;

fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static SET: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
}

/// A currently free TCP port on 127.0.0.1 not handed out before by this process.
pub fn free_port() -> Result<u16, Error> {
    for _ in 0..100 {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| Error::io("binding 127.0.0.1:0 to find a free port", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("reading a bound port", e))?
            .port();
        drop(listener);
        let mut set = handed_out().lock().unwrap_or_else(|p| p.into_inner());
        if set.insert(port) {
            return Ok(port);
        }
    }
    Err(Error::io(
        "finding a free port",
        std::io::Error::other("no free port after 100 tries"),
    ))
}
