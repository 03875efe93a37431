//! How the ranks of an NCCL world agree on its `ncclUniqueId`, as `torchrun`'s TCP store does
//! for PyTorch: rank 0 creates the id and serves it on `MASTER_ADDR:MASTER_PORT`; every other
//! rank connects (retrying while rank 0 starts) and reads the 128 bytes. Rank 0 returns once
//! every other rank has read them.

use crate::{DistributedError, Result};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The bytes of an `ncclUniqueId`.
pub(crate) const ID_BYTES: usize = 128;

/// Where rank 0 serves the id: `MASTER_ADDR` (default `127.0.0.1`) and `MASTER_PORT`
/// (default 29500, torchrun's).
pub(crate) fn store_address(lookup: impl Fn(&str) -> Option<String>) -> Result<String> {
    let addr = lookup("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
    if addr.trim().is_empty() {
        return Err(DistributedError::Launcher(
            "MASTER_ADDR is set but empty: it names rank 0's host".into(),
        ));
    }
    let port = lookup("MASTER_PORT").unwrap_or_else(|| "29500".into());
    let port: u16 = port.trim().parse().map_err(|e| {
        DistributedError::Launcher(format!("MASTER_PORT={port:?} is not a port: {e}"))
    })?;
    Ok(format!("{}:{port}", addr.trim()))
}

fn store_error(what: String) -> DistributedError {
    DistributedError::Launcher(format!("NCCL unique id store: {what}"))
}

/// Rank 0's side of the store: a listener bound to `MASTER_ADDR:MASTER_PORT`.
pub(crate) struct IdServer {
    listener: TcpListener,
    address: String,
}

impl IdServer {
    /// Listens on `address`; a port already taken (another job's rank 0) is an error naming it.
    pub(crate) fn bind(address: &str) -> Result<IdServer> {
        let listener = TcpListener::bind(address)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| store_error(format!("rank 0 cannot listen on {address}: {e}")))?;
        // The address bound (a host name resolved, the port the system chose for port 0).
        let address = listener
            .local_addr()
            .map_or_else(|_| address.to_string(), |a| a.to_string());
        Ok(IdServer { listener, address })
    }

    /// The address the listener is bound to.
    #[cfg(test)]
    pub(crate) fn local_address(&self) -> String {
        self.address.clone()
    }

    /// Serves `id` to the `world_size - 1` other ranks, then stops listening; an error when
    /// they have not all fetched it within `timeout`.
    pub(crate) fn serve(
        self,
        id: &[u8; ID_BYTES],
        world_size: usize,
        timeout: Duration,
    ) -> Result<()> {
        let address = &self.address;
        let deadline = Instant::now() + timeout;
        let mut served = 0;
        while served + 1 < world_size {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    stream
                        .set_nonblocking(false)
                        .and_then(|()| stream.write_all(id))
                        .map_err(|e| store_error(format!("sending the id: {e}")))?;
                    served += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(store_error(format!(
                            "{served} of {} ranks fetched the id from {address} within {timeout:?}",
                            world_size - 1
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(store_error(format!("accepting on {address}: {e}"))),
            }
        }
        Ok(())
    }
}

/// A connection to the first of `address`'s resolved addresses that accepts one (a host name
/// may resolve to IPv6 and IPv4 addresses, of which rank 0 bound one).
fn connect(address: &str) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address resolved");
    for candidate in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&candidate, Duration::from_secs(1)) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Ranks other than 0: the id rank 0 serves at `address`, retrying until `timeout`.
pub(crate) fn fetch_id(address: &str, timeout: Duration) -> Result<[u8; ID_BYTES]> {
    let deadline = Instant::now() + timeout;
    loop {
        let attempt = connect(address);
        match attempt {
            Ok(mut stream) => {
                let mut id = [0u8; ID_BYTES];
                stream
                    .set_read_timeout(Some(timeout))
                    .and_then(|()| stream.read_exact(&mut id))
                    .map_err(|e| store_error(format!("reading the id from {address}: {e}")))?;
                return Ok(id);
            }
            Err(e) if Instant::now() > deadline => {
                return Err(store_error(format!(
                    "rank 0 did not serve the id at {address} within {timeout:?}: {e}"
                )));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_id() -> [u8; ID_BYTES] {
        let mut id = [0u8; ID_BYTES];
        id.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8 ^ 0x5a);
        id
    }

    #[test]
    fn every_rank_gets_rank_zeros_id() {
        // Port 0: the system picks a free port, so parallel test runs never collide.
        let server = IdServer::bind("127.0.0.1:0").unwrap();
        let address = server.local_address();
        let id = test_id();
        let timeout = Duration::from_secs(20);
        let clients: Vec<_> = (0..2)
            .map(|_| {
                let address = address.clone();
                std::thread::spawn(move || fetch_id(&address, timeout))
            })
            .collect();
        server.serve(&id, 3, timeout).unwrap();
        for c in clients {
            assert_eq!(c.join().unwrap().unwrap(), id);
        }
    }

    #[test]
    fn ranks_that_start_before_rank_zero_retry_until_it_listens() {
        // Find a free port, release it, and let the client try it before rank 0 binds.
        let address = IdServer::bind("127.0.0.1:0").unwrap().local_address();
        let timeout = Duration::from_secs(20);
        let client = {
            let address = address.clone();
            std::thread::spawn(move || fetch_id(&address, timeout))
        };
        std::thread::sleep(Duration::from_millis(100));
        let id = test_id();
        IdServer::bind(&address)
            .unwrap()
            .serve(&id, 2, timeout)
            .unwrap();
        assert_eq!(client.join().unwrap().unwrap(), id);
    }

    #[test]
    fn a_rank_that_never_comes_is_a_launcher_error_naming_the_count() {
        let server = IdServer::bind("127.0.0.1:0").unwrap();
        let address = server.local_address();
        let err = server
            .serve(&test_id(), 2, Duration::from_millis(100))
            .unwrap_err();
        assert!(matches!(err, DistributedError::Launcher(_)), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("0 of 1 ranks") && text.contains(&address),
            "{text}"
        );
    }

    #[test]
    fn a_port_already_taken_is_a_launcher_error_naming_it() {
        let first = IdServer::bind("127.0.0.1:0").unwrap();
        let address = first.local_address();
        let Err(err) = IdServer::bind(&address) else {
            panic!("two listeners on {address}");
        };
        assert!(matches!(err, DistributedError::Launcher(_)), "{err}");
        assert!(err.to_string().contains(&address), "{err}");
    }

    #[test]
    fn a_missing_rank_zero_is_a_launcher_error_not_a_hang() {
        // A port just released: nothing listens there.
        let address = IdServer::bind("127.0.0.1:0").unwrap().local_address();
        let err = fetch_id(&address, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, DistributedError::Launcher(_)), "{err}");
        assert!(err.to_string().contains(&address), "{err}");
    }

    #[test]
    fn the_address_comes_from_master_addr_and_port() {
        let env = |k: &str| match k {
            "MASTER_ADDR" => Some("10.0.0.7".to_string()),
            "MASTER_PORT" => Some("1234".to_string()),
            _ => None,
        };
        assert_eq!(store_address(env).unwrap(), "10.0.0.7:1234");
        assert_eq!(store_address(|_| None).unwrap(), "127.0.0.1:29500");
        let bad = store_address(|k| (k == "MASTER_PORT").then(|| "x".to_string()));
        assert!(bad.unwrap_err().to_string().contains("MASTER_PORT"));
        let big = store_address(|k| (k == "MASTER_PORT").then(|| "70000".to_string()));
        assert!(
            big.unwrap_err()
                .to_string()
                .contains("MASTER_PORT=\"70000\"")
        );
        let empty = store_address(|k| (k == "MASTER_ADDR").then(String::new));
        assert!(empty.unwrap_err().to_string().contains("MASTER_ADDR"));
    }
}
