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
    let port = lookup("MASTER_PORT").unwrap_or_else(|| "29500".into());
    let port: u16 = port.trim().parse().map_err(|e| {
        DistributedError::Launcher(format!("MASTER_PORT={port:?} is not a port: {e}"))
    })?;
    Ok(format!("{}:{port}", addr.trim()))
}

fn store_error(what: String) -> DistributedError {
    DistributedError::Launcher(format!("NCCL unique id store: {what}"))
}

/// Rank 0: serves `id` to the `world_size - 1` other ranks at `address`.
pub(crate) fn serve_id(
    address: &str,
    id: &[u8; ID_BYTES],
    world_size: usize,
    timeout: Duration,
) -> Result<()> {
    let listener = TcpListener::bind(address)
        .map_err(|e| store_error(format!("rank 0 cannot listen on {address}: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| store_error(format!("{address}: {e}")))?;
    let deadline = Instant::now() + timeout;
    let mut served = 0;
    while served + 1 < world_size {
        match listener.accept() {
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

/// Ranks other than 0: the id rank 0 serves at `address`, retrying until `timeout`.
pub(crate) fn fetch_id(address: &str, timeout: Duration) -> Result<[u8; ID_BYTES]> {
    let deadline = Instant::now() + timeout;
    loop {
        let attempt = address
            .to_socket_addrs()
            .and_then(|mut addrs| {
                addrs.next().ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no address resolved")
                })
            })
            .and_then(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)));
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

    #[test]
    fn every_rank_gets_rank_zeros_id() {
        let address = "127.0.0.1:29613";
        let mut id = [0u8; ID_BYTES];
        id.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8 ^ 0x5a);
        let timeout = Duration::from_secs(20);
        // The clients start first: they retry until rank 0 listens.
        let clients: Vec<_> = (0..2)
            .map(|_| std::thread::spawn(move || fetch_id(address, timeout)))
            .collect();
        serve_id(address, &id, 3, timeout).unwrap();
        for c in clients {
            assert_eq!(c.join().unwrap().unwrap(), id);
        }
    }

    #[test]
    fn a_missing_rank_zero_is_a_launcher_error_not_a_hang() {
        let err = fetch_id("127.0.0.1:29614", Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, DistributedError::Launcher(_)), "{err}");
        assert!(err.to_string().contains("127.0.0.1:29614"), "{err}");
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
    }
}
