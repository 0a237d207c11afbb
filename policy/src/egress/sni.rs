//! The server name of a TLS ClientHello, the first bytes a client sends
//! through a CONNECT tunnel to port 443. The ClientHello may span several
//! handshake records and arrive in pieces; the caller feeds what it has.

use crate::lang::hosts::normalize_name;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SniError {
    #[error("not a TLS handshake")]
    NotTls,
    #[error("the first handshake message is not a ClientHello")]
    NotClientHello,
    #[error("ClientHello larger than {0} bytes")]
    TooLarge(usize),
    #[error("malformed ClientHello: {0}")]
    Malformed(&'static str),
    #[error("ClientHello server name is not a host name")]
    BadName,
}

const RECORD_HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const MAX_RECORD: usize = 16_384 + 2048;

/// `Ok(None)`: feed more bytes. `Ok(Some(sni))`: the whole ClientHello was
/// read; `sni` is its normalised server name, if it has one.
pub fn client_hello_sni(buf: &[u8], cap: usize) -> Result<Option<Option<String>>, SniError> {
    // Reassemble the handshake stream from consecutive handshake records.
    let mut handshake = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = buf.get(at..at + 5) else {
            return more(buf, cap);
        };
        if header[0] != RECORD_HANDSHAKE {
            return Err(if at == 0 {
                SniError::NotTls
            } else {
                SniError::Malformed("record of another type inside the ClientHello")
            });
        }
        if header[1] != 3 {
            return Err(SniError::NotTls);
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > MAX_RECORD {
            return Err(SniError::Malformed("record length"));
        }
        let Some(body) = buf.get(at + 5..at + 5 + len) else {
            return more(buf, cap);
        };
        handshake.extend_from_slice(body);
        at += 5 + len;
        if handshake.len() >= 4 {
            if handshake[0] != CLIENT_HELLO {
                return Err(SniError::NotClientHello);
            }
            let msg_len = (usize::from(handshake[1]) << 16)
                | (usize::from(handshake[2]) << 8)
                | usize::from(handshake[3]);
            if msg_len + 4 > cap {
                return Err(SniError::TooLarge(cap));
            }
            if handshake.len() >= msg_len + 4 {
                return parse_hello(&handshake[4..msg_len + 4]).map(Some);
            }
        }
        if at > cap {
            return Err(SniError::TooLarge(cap));
        }
    }
}

fn more(buf: &[u8], cap: usize) -> Result<Option<Option<String>>, SniError> {
    if buf.len() >= cap {
        Err(SniError::TooLarge(cap))
    } else {
        Ok(None)
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SniError> {
        if self.0.len() < n {
            return Err(SniError::Malformed("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<usize, SniError> {
        Ok(usize::from(self.take(1)?[0]))
    }

    fn u16(&mut self) -> Result<usize, SniError> {
        let b = self.take(2)?;
        Ok(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    fn vec8(&mut self) -> Result<&'a [u8], SniError> {
        let n = self.u8()?;
        self.take(n)
    }

    fn vec16(&mut self) -> Result<&'a [u8], SniError> {
        let n = self.u16()?;
        self.take(n)
    }
}

fn parse_hello(body: &[u8]) -> Result<Option<String>, SniError> {
    let mut r = Reader(body);
    r.take(2 + 32)?; // legacy_version, random
    r.vec8()?; // session id
    r.vec16()?; // cipher suites
    r.vec8()?; // compression methods
    if r.0.is_empty() {
        return Ok(None);
    }
    let mut exts = Reader(r.vec16()?);
    if !r.0.is_empty() {
        return Err(SniError::Malformed("bytes after the extensions"));
    }
    let mut sni = None;
    let mut seen = Vec::new();
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let data = exts.vec16()?;
        if seen.contains(&kind) {
            return Err(SniError::Malformed("extension repeated"));
        }
        seen.push(kind);
        if kind as u16 != EXT_SERVER_NAME {
            continue;
        }
        let mut ext = Reader(data);
        let mut list = Reader(ext.vec16()?);
        if !ext.0.is_empty() {
            return Err(SniError::Malformed("server_name extension length"));
        }
        while !list.0.is_empty() {
            let name_type = list.u8()?;
            let name = list.vec16()?;
            if name_type != 0 {
                continue;
            }
            if sni.is_some() {
                return Err(SniError::Malformed("two host names"));
            }
            let text = std::str::from_utf8(name).map_err(|_| SniError::BadName)?;
            sni = Some(normalize_name(text).map_err(|_| SniError::BadName)?);
        }
    }
    Ok(sni)
}

/// A ClientHello for tests and the benchmark: one extension, server_name
/// (when `sni` is given), split into records of at most `record` bytes.
#[cfg(any(test, feature = "test-support"))]
pub fn build_client_hello(sni: Option<&str>, record: usize) -> Vec<u8> {
    let mut exts = Vec::new();
    if let Some(name) = sni {
        let n = name.as_bytes();
        let mut entry = vec![0u8];
        entry.extend_from_slice(&(n.len() as u16).to_be_bytes());
        entry.extend_from_slice(n);
        let mut list = (entry.len() as u16).to_be_bytes().to_vec();
        list.extend_from_slice(&entry);
        exts.extend_from_slice(&EXT_SERVER_NAME.to_be_bytes());
        exts.extend_from_slice(&(list.len() as u16).to_be_bytes());
        exts.extend_from_slice(&list);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // TLS_AES_128_GCM_SHA256
    body.extend_from_slice(&[1, 0]); // null compression
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![CLIENT_HELLO];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut out = Vec::new();
    for chunk in hs.chunks(record.max(1)) {
        out.extend_from_slice(&[RECORD_HANDSHAKE, 3, 1]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: usize = 16_384;

    #[test]
    fn reads_the_server_name() {
        let hello = build_client_hello(Some("API.Example.com."), 16_384);
        assert_eq!(
            client_hello_sni(&hello, CAP),
            Ok(Some(Some("api.example.com".into())))
        );
        assert_eq!(
            client_hello_sni(&build_client_hello(None, 16_384), CAP),
            Ok(Some(None))
        );
    }

    #[test]
    fn split_across_reads_and_records() {
        let hello = build_client_hello(Some("a.example"), 7);
        for cut in 0..hello.len() {
            assert_eq!(client_hello_sni(&hello[..cut], CAP), Ok(None), "cut {cut}");
        }
        assert_eq!(
            client_hello_sni(&hello, CAP),
            Ok(Some(Some("a.example".into())))
        );
    }

    #[test]
    fn refuses_what_is_not_a_client_hello() {
        assert_eq!(
            client_hello_sni(b"GET / HTTP/1.1\r\n", CAP),
            Err(SniError::NotTls)
        );
        assert_eq!(
            client_hello_sni(&[22, 3, 1, 0, 4, 2, 0, 0, 0], CAP),
            Err(SniError::NotClientHello)
        );
        let mut hello = build_client_hello(Some("a.example"), 16_384);
        let n = hello.len();
        hello[n - 3] = 0xff; // a non-ASCII byte in the name
        assert_eq!(client_hello_sni(&hello, CAP), Err(SniError::BadName));
        let hello = build_client_hello(Some("a.example"), 16_384);
        assert_eq!(client_hello_sni(&hello, 20), Err(SniError::TooLarge(20)));
        // An endless stream of tiny records hits the cap too.
        let endless: Vec<u8> = [22u8, 3, 1, 0, 1, 1].repeat(10_000);
        assert!(client_hello_sni(&endless[..5], CAP).unwrap().is_none());
        assert!(client_hello_sni(&endless, CAP).is_err());
        // A ClientHello followed by an application-data record: a record
        // of another type before the hello is complete.
        let mut hello = build_client_hello(Some("a.example"), 10);
        hello.truncate(15);
        hello.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
        assert!(client_hello_sni(&hello, CAP).is_err());
    }

    #[test]
    fn refuses_two_names() {
        let mut hello = build_client_hello(Some("a.example"), 16_384);
        // Rebuild with two host_name entries by hand.
        let one = b"a.example";
        let two = b"b.example";
        let mut list = Vec::new();
        for n in [&one[..], &two[..]] {
            list.push(0);
            list.extend_from_slice(&(n.len() as u16).to_be_bytes());
            list.extend_from_slice(n);
        }
        let mut ext = (list.len() as u16).to_be_bytes().to_vec();
        ext.extend_from_slice(&list);
        let mut exts = vec![0, 0];
        exts.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        exts.extend_from_slice(&ext);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 1, 1, 0]);
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        hello.clear();
        hello.extend_from_slice(&[22, 3, 1]);
        hello.extend_from_slice(&((body.len() + 4) as u16).to_be_bytes());
        hello.push(1);
        hello.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hello.extend_from_slice(&body);
        assert_eq!(
            client_hello_sni(&hello, CAP),
            Err(SniError::Malformed("two host names"))
        );
    }
}
