//! HAProxy's PROXY protocol (versions 1 and 2), read from the load balancers the operator names
//! (`proxy_protocol_from`): behind a load balancer in TCP mode every connection comes from the
//! balancer's address, so the per-address caps (`max_connections_per_address`, the first
//! WebSocket frames read at once per address) held every participant at once: one client with
//! a hundred idle upgrades locked every agent out. The header at the start of such a connection
//! gives the client's address; the connection is counted, limited and logged under it.
//!
//! Only the named sources are believed (anyone else could claim any address), and from them a
//! header is optional (a health check from the balancer's host, `docker`'s own, sends none).
//! The header is peeked, then consumed exactly, so a connection without one loses no byte.

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpStream;

/// The networks whose connections may begin with a PROXY header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// A comma-separated list of addresses and networks (`10.0.0.0/8, 192.168.1.5`); empty: none.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut nets = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let net = match item.parse::<IpNet>() {
                Ok(net) => net,
                Err(_) => item
                    .parse::<IpAddr>()
                    .map(IpNet::from)
                    .map_err(|_| format!("{item:?} is neither an address nor a network (ADDRESS/BITS)"))?,
            };
            nets.push(net);
        }
        Ok(Self(nets))
    }

    pub fn trusts(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.0.iter().any(|net| net.contains(&address))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What the start of a connection said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Too few bytes yet to tell.
    Incomplete,
    /// The connection does not begin with a PROXY header.
    Absent,
    /// A header of `len` bytes; `client`: the address it gives (None for a balancer's own
    /// connection: v2 LOCAL, v1 UNKNOWN, or a family other than TCP over IPv4/IPv6).
    Header {
        len: usize,
        client: Option<SocketAddr>,
    },
    Invalid(String),
}

/// The longest wait for a load balancer's header (or its connection's first bytes): a balancer
/// sends it at once, with the connection.
pub const HEADER_WAIT: Duration = Duration::from_secs(5);

/// The longest header: version 2's fixed part and a 16-bit length of addresses and TLVs.
const MAX_HEADER: usize = V2_FIXED + u16::MAX as usize;

const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// A v1 header's longest form (the specification's 107 bytes).
const V1_MAX: usize = 107;
/// Version 2's fixed part: the signature, version and command, family, length.
const V2_FIXED: usize = 16;

/// Reads the start of a connection (as much as has arrived).
pub fn parse(bytes: &[u8]) -> Parsed {
    if bytes.starts_with(V2_SIGNATURE) {
        return parse_v2(bytes);
    }
    if bytes.starts_with(b"PROXY ") {
        return parse_v1(bytes);
    }
    // Still a prefix of either form: wait for more.
    let prefix_of = |form: &[u8]| bytes.len() < form.len() && form.starts_with(bytes);
    match prefix_of(V2_SIGNATURE) || prefix_of(b"PROXY ") {
        true => Parsed::Incomplete,
        false => Parsed::Absent,
    }
}

fn parse_v1(bytes: &[u8]) -> Parsed {
    let Some(end) = bytes.windows(2).take(V1_MAX - 1).position(|w| w == b"\r\n") else {
        return match bytes.len() >= V1_MAX {
            true => Parsed::Invalid(format!("a version 1 header longer than {V1_MAX} bytes")),
            false => Parsed::Incomplete,
        };
    };
    let len = end + 2;
    let Ok(line) = std::str::from_utf8(&bytes[..end]) else {
        return Parsed::Invalid("a version 1 header that is not text".into());
    };
    let fields: Vec<&str> = line.split(' ').collect();
    match fields.as_slice() {
        ["PROXY", "UNKNOWN", ..] => Parsed::Header { len, client: None },
        [
            "PROXY",
            family @ ("TCP4" | "TCP6"),
            source,
            _destination,
            port,
            _destination_port,
        ] => {
            let ip = match *family {
                "TCP4" => source.parse::<Ipv4Addr>().map(IpAddr::V4).ok(),
                _ => source.parse::<Ipv6Addr>().map(IpAddr::V6).ok(),
            };
            match (ip, port.parse::<u16>()) {
                (Some(ip), Ok(port)) => Parsed::Header {
                    len,
                    client: Some(SocketAddr::new(ip, port)),
                },
                _ => Parsed::Invalid(format!("a version 1 header with a bad address: {line:?}")),
            }
        }
        _ => Parsed::Invalid(format!("a version 1 header of an unknown form: {line:?}")),
    }
}

fn parse_v2(bytes: &[u8]) -> Parsed {
    if bytes.len() < V2_FIXED {
        return Parsed::Incomplete;
    }
    let (version, command) = (bytes[12] >> 4, bytes[12] & 0x0f);
    if version != 2 || command > 1 {
        return Parsed::Invalid(format!("a version 2 header with version {version}, command {command}"));
    }
    let len = V2_FIXED + usize::from(u16::from_be_bytes([bytes[14], bytes[15]]));
    if bytes.len() < len {
        return Parsed::Incomplete;
    }
    let body = &bytes[V2_FIXED..len];
    // LOCAL: the balancer's own connection (its health check).
    if command == 0 {
        return Parsed::Header { len, client: None };
    }
    let client = match bytes[13] {
        // TCP over IPv4: source, destination (4 bytes each), source port, destination port.
        0x11 if body.len() >= 12 => Some(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(body[0], body[1], body[2], body[3])),
            u16::from_be_bytes([body[8], body[9]]),
        )),
        // TCP over IPv6: 16 bytes each.
        0x21 if body.len() >= 36 => {
            let source: [u8; 16] = body[..16].try_into().expect("16 bytes");
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(source)),
                u16::from_be_bytes([body[32], body[33]]),
            ))
        }
        0x11 | 0x21 => return Parsed::Invalid("a version 2 header shorter than its addresses".into()),
        // UDP, UNIX sockets, UNSPEC: no client address to use.
        _ => None,
    };
    Parsed::Header { len, client }
}

/// Reads a PROXY header at the start of `stream`, if it has one, within `deadline`: the client's
/// address it gives, or None (no header, or one without an address). A header that does not
/// parse, or that does not arrive whole in time, is an error (the connection is closed).
pub async fn read_header(stream: &mut TcpStream, deadline: Duration) -> Result<Option<SocketAddr>, String> {
    let read = async {
        // Grown while a header fills it (version 2 may carry TLVs past any small buffer).
        let mut buf = vec![0u8; 256];
        loop {
            let n = stream.peek(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the connection closed before its first bytes".to_string());
            }
            match parse(&buf[..n]) {
                Parsed::Absent => return Ok(None),
                Parsed::Invalid(why) => return Err(why),
                Parsed::Header { len, client } => {
                    // Consumed exactly: what follows is the connection's own.
                    let mut header = vec![0u8; len];
                    tokio::io::AsyncReadExt::read_exact(stream, &mut header)
                        .await
                        .map_err(|e| e.to_string())?;
                    return Ok(client);
                }
                // A peek returns what has arrived at once; the rest of a header is a segment
                // away (a balancer sends it whole, in its first).
                Parsed::Incomplete if n == buf.len() && buf.len() < MAX_HEADER => {
                    buf.resize((buf.len() * 4).min(MAX_HEADER), 0);
                }
                Parsed::Incomplete => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    };
    tokio::time::timeout(deadline, read)
        .await
        .map_err(|_| format!("no whole PROXY header or first bytes within {deadline:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(0x20 | command);
        out.push(family);
        out.extend((body.len() as u16).to_be_bytes());
        out.extend(body);
        out
    }

    #[test]
    fn both_versions_give_the_client_address() {
        let line = b"PROXY TCP4 203.0.113.7 10.0.0.2 51234 8080\r\nGET / HTTP/1.1\r\n";
        assert_eq!(
            parse(line),
            Parsed::Header {
                len: 44,
                client: Some("203.0.113.7:51234".parse().unwrap())
            }
        );
        assert_eq!(
            parse(b"PROXY TCP6 2001:db8::1 2001:db8::2 4000 8080\r\n"),
            Parsed::Header {
                len: 46,
                client: Some("[2001:db8::1]:4000".parse().unwrap())
            }
        );
        assert_eq!(parse(b"PROXY UNKNOWN\r\n"), Parsed::Header { len: 15, client: None });
        let mut body = vec![198, 51, 100, 9, 10, 0, 0, 2];
        body.extend(40000u16.to_be_bytes());
        body.extend(8080u16.to_be_bytes());
        let mut bytes = v2(1, 0x11, &body);
        let len = bytes.len();
        bytes.extend(b"PRI * HTTP/2.0");
        assert_eq!(
            parse(&bytes),
            Parsed::Header {
                len,
                client: Some("198.51.100.9:40000".parse().unwrap())
            }
        );
        // A balancer's health check (LOCAL), with TLVs after the addresses as HAProxy may add.
        assert_eq!(parse(&v2(0, 0x00, &[])), Parsed::Header { len: 16, client: None });
        let mut body6 = vec![0u8; 36];
        body6[15] = 1;
        body6[32..34].copy_from_slice(&7u16.to_be_bytes());
        body6.extend([0x04, 0x00, 0x01, 0x00]);
        assert_eq!(
            parse(&v2(1, 0x21, &body6)),
            Parsed::Header {
                len: 56,
                client: Some("[::1]:7".parse().unwrap())
            }
        );
    }

    #[test]
    fn other_starts_are_told_apart_from_a_header_still_arriving() {
        for plain in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PRI * HTTP/2.0",
            b"POST /x",
            b"PUT",
            b"\r\n\r\nX",
        ] {
            assert_eq!(parse(plain), Parsed::Absent, "{plain:?}");
        }
        for partial in [
            &b"P"[..],
            b"PROX",
            b"PROXY TCP4 1.2.3.4",
            b"\r\n\r\n\0\r\nQU",
            &v2(1, 0x11, &[0; 12])[..20],
        ] {
            assert_eq!(parse(partial), Parsed::Incomplete, "{partial:?}");
        }
        for bad in [
            &b"PROXY TCP4 1.2.3.400 1.2.3.4 1 2\r\n"[..],
            b"PROXY SCTP a b c d\r\n",
            &[b"PROXY ".as_slice(), &[b'x'; 120]].concat(),
        ] {
            assert!(matches!(parse(bad), Parsed::Invalid(_)), "{bad:?}");
        }
        let mut wrong_version = v2(1, 0x11, &[0; 12]);
        wrong_version[12] = 0x11;
        assert!(matches!(parse(&wrong_version), Parsed::Invalid(_)));
    }

    #[test]
    fn only_the_named_networks_are_trusted() {
        let trusted = TrustedProxies::parse("10.0.0.0/8, 192.168.1.5 ,fd00::/8").unwrap();
        for (address, trusts) in [
            ("10.1.2.3", true),
            ("192.168.1.5", true),
            ("192.168.1.6", false),
            ("fd00::1", true),
            ("::ffff:10.0.0.1", true),
            ("127.0.0.1", false),
        ] {
            assert_eq!(trusted.trusts(address.parse().unwrap()), trusts, "{address}");
        }
        assert!(TrustedProxies::parse("").unwrap().is_empty());
        let e = TrustedProxies::parse("10.0.0.0/8,haproxy").unwrap_err();
        assert!(e.contains("\"haproxy\""), "{e}");
    }

    /// Over a real socket: the header is consumed exactly, the bytes after it stay; a
    /// connection without one keeps every byte.
    #[tokio::test]
    async fn a_header_is_read_off_and_the_rest_stays() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        for (sent, client) in [
            (
                &b"PROXY TCP4 203.0.113.7 10.0.0.2 51234 8080\r\nGET /"[..],
                Some("203.0.113.7:51234"),
            ),
            (b"GET /", None),
        ] {
            let mut out = tokio::net::TcpStream::connect(addr).await.unwrap();
            out.write_all(sent).await.unwrap();
            let (mut stream, _) = listener.accept().await.unwrap();
            let read = read_header(&mut stream, Duration::from_secs(5)).await.unwrap();
            assert_eq!(read, client.map(|c| c.parse().unwrap()));
            let mut rest = [0u8; 5];
            stream.read_exact(&mut rest).await.unwrap();
            assert_eq!(&rest, b"GET /");
        }
        // A version 2 header longer than the first peek (TLVs of 1000 bytes).
        let mut body = vec![203, 0, 113, 8, 10, 0, 0, 2];
        body.extend(5000u16.to_be_bytes());
        body.extend(8080u16.to_be_bytes());
        body.extend([0xEE, 0x03, 0xE5]);
        body.extend([b'x'; 997]);
        let mut long = V2_SIGNATURE.to_vec();
        long.extend([0x21, 0x11]);
        long.extend((body.len() as u16).to_be_bytes());
        long.extend(&body);
        long.extend(b"GET /");
        let mut out = tokio::net::TcpStream::connect(addr).await.unwrap();
        out.write_all(&long).await.unwrap();
        let (mut stream, _) = listener.accept().await.unwrap();
        let read = read_header(&mut stream, Duration::from_secs(5)).await.unwrap();
        assert_eq!(read, Some("203.0.113.8:5000".parse().unwrap()));
        let mut rest = [0u8; 5];
        stream.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"GET /");
        // Half a header that never completes: an error at the deadline.
        let mut out = tokio::net::TcpStream::connect(addr).await.unwrap();
        out.write_all(b"PROXY TCP4 1.2").await.unwrap();
        let (mut stream, _) = listener.accept().await.unwrap();
        let e = read_header(&mut stream, Duration::from_millis(100)).await.unwrap_err();
        assert!(e.contains("within"), "{e}");
    }
}
