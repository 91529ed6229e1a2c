//! A tar stream read as it passes: the engine's archives are never held
//! whole. The scanner takes the bytes as they come and gives back each
//! entry's header (with its PAX and GNU long-name records applied) and its
//! data, in pieces that borrow nothing. Headers are parsed by the tar
//! crate; only the walk from one header to the next is done here, because
//! the crate reads from a blocking reader and these bytes arrive on an
//! async stream.

use bytes::Bytes;
use tar::{EntryType, Header, PaxExtensions};

const BLOCK: u64 = 512;
/// The most a PAX record set or a long name may take: the engine writes a
/// few hundred bytes; more is not an archive of a workspace.
const MAX_META: u64 = 1 << 20;

/// One entry's header, in the terms the file calls use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// As in the archive, without a trailing `/`.
    pub name: String,
    pub kind: EntryType,
    /// Permission bits and setuid, setgid and sticky.
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub size: u64,
    pub mtime: u64,
    pub link: Option<String>,
}

/// What the scanner found next.
#[derive(Debug)]
pub enum Piece {
    Head(Head),
    Data(Bytes),
    /// The archive's end marker.
    End,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Header,
    Data {
        left: u64,
        pad: u64,
    },
    Meta {
        kind: EntryType,
        left: u64,
        pad: u64,
    },
    Pad {
        left: u64,
    },
    End,
}

pub struct Scanner {
    state: State,
    block: Vec<u8>,
    meta: Vec<u8>,
    pax: Option<Vec<u8>>,
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner {
            state: State::Header,
            block: Vec::with_capacity(BLOCK as usize),
            meta: Vec::new(),
            pax: None,
            long_name: None,
            long_link: None,
        }
    }
}

fn padding(size: u64) -> u64 {
    (BLOCK - size % BLOCK) % BLOCK
}

impl Scanner {
    /// The next piece in `input`, taking from it what it used; `None` when
    /// more input is needed.
    pub fn next(&mut self, input: &mut Bytes) -> Result<Option<Piece>, String> {
        loop {
            match self.state {
                State::End => {
                    input.clear();
                    return Ok(Some(Piece::End));
                }
                State::Header => {
                    let wanted = BLOCK as usize - self.block.len();
                    let taken = input.split_to(wanted.min(input.len()));
                    self.block.extend_from_slice(&taken);
                    if self.block.len() < BLOCK as usize {
                        return Ok(None);
                    }
                    let block = std::mem::take(&mut self.block);
                    if let Some(head) = self.header(&block)? {
                        return Ok(Some(head));
                    }
                }
                State::Data { left: 0, pad } | State::Meta { left: 0, pad, .. } => {
                    if let State::Meta { kind, .. } = self.state {
                        self.keep_meta(kind);
                    }
                    self.state = State::Pad { left: pad };
                }
                State::Data { left, pad } => {
                    if input.is_empty() {
                        return Ok(None);
                    }
                    let taken = input.split_to(left.min(input.len() as u64) as usize);
                    self.state = State::Data {
                        left: left - taken.len() as u64,
                        pad,
                    };
                    return Ok(Some(Piece::Data(taken)));
                }
                State::Meta { kind, left, pad } => {
                    if input.is_empty() {
                        return Ok(None);
                    }
                    let taken = input.split_to(left.min(input.len() as u64) as usize);
                    self.meta.extend_from_slice(&taken);
                    let left = left - taken.len() as u64;
                    self.state = State::Meta { kind, left, pad };
                }
                State::Pad { left: 0 } => self.state = State::Header,
                State::Pad { left } => {
                    if input.is_empty() {
                        return Ok(None);
                    }
                    let taken = input.split_to(left.min(input.len() as u64) as usize);
                    self.state = State::Pad {
                        left: left - taken.len() as u64,
                    };
                }
            }
        }
    }

    /// Reads one header block: an entry's (returned), a record for the
    /// next entry (kept), or the end marker.
    fn header(&mut self, block: &[u8]) -> Result<Option<Piece>, String> {
        if block.iter().all(|byte| *byte == 0) {
            self.state = State::End;
            return Ok(Some(Piece::End));
        }
        let header = Header::from_byte_slice(block);
        let checked = header.cksum().map_err(|error| error.to_string())?;
        let sum: u32 = block
            .iter()
            .enumerate()
            .map(|(at, byte)| {
                if (148..156).contains(&at) {
                    32
                } else {
                    u32::from(*byte)
                }
            })
            .sum();
        if checked != sum {
            return Err("a header's checksum does not match: not a tar stream".into());
        }
        let kind = header.entry_type();
        let mut size = header.entry_size().map_err(|error| error.to_string())?;
        if matches!(
            kind,
            EntryType::XHeader
                | EntryType::XGlobalHeader
                | EntryType::GNULongName
                | EntryType::GNULongLink
        ) {
            if size > MAX_META {
                return Err(format!(
                    "a {size}-byte extended header: more than the {MAX_META} bytes read"
                ));
            }
            self.meta.clear();
            self.state = State::Meta {
                kind,
                left: size,
                pad: padding(size),
            };
            return Ok(None);
        }
        let number = |value: std::io::Result<u64>| value.map_err(|error| error.to_string());
        let mut head = Head {
            name: String::from_utf8_lossy(&header.path_bytes()).into_owned(),
            kind,
            mode: header.mode().map_err(|error| error.to_string())? & 0o7777,
            uid: number(header.uid())?,
            gid: number(header.gid())?,
            size,
            mtime: number(header.mtime())?,
            link: header
                .link_name_bytes()
                .map(|link| String::from_utf8_lossy(&link).into_owned()),
        };
        if let Some(name) = self.long_name.take() {
            head.name = String::from_utf8_lossy(&name).into_owned();
        }
        if let Some(link) = self.long_link.take() {
            head.link = Some(String::from_utf8_lossy(&link).into_owned());
        }
        if let Some(records) = self.pax.take() {
            apply_pax(&records, &mut head)?;
            size = head.size;
        }
        head.name = head.name.trim_end_matches('/').to_string();
        // Only regular files' sizes are data that follows (a hard link's
        // or a directory's size says nothing about the stream).
        let data = match kind {
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => size,
            _ => 0,
        };
        head.size = size;
        self.state = State::Data {
            left: data,
            pad: padding(data),
        };
        Ok(Some(Piece::Head(head)))
    }

    fn keep_meta(&mut self, kind: EntryType) {
        let mut meta = std::mem::take(&mut self.meta);
        match kind {
            EntryType::XHeader => self.pax = Some(meta),
            EntryType::GNULongName | EntryType::GNULongLink => {
                while meta.last() == Some(&0) {
                    meta.pop();
                }
                if kind == EntryType::GNULongName {
                    self.long_name = Some(meta);
                } else {
                    self.long_link = Some(meta);
                }
            }
            // Global records: nothing the file calls use.
            _ => {}
        }
    }
}

/// The PAX records that change what the file calls see.
fn apply_pax(records: &[u8], head: &mut Head) -> Result<(), String> {
    for record in PaxExtensions::new(records) {
        let record = record.map_err(|error| format!("a malformed PAX record: {error}"))?;
        let value = String::from_utf8_lossy(record.value_bytes()).into_owned();
        let number = || {
            value
                .split('.')
                .next()
                .unwrap_or_default()
                .parse::<u64>()
                .map_err(|_| {
                    format!(
                        "a PAX record {:?} of {value:?} is not a number",
                        record.key()
                    )
                })
        };
        match record.key_bytes() {
            b"path" => head.name = value.clone(),
            b"linkpath" => head.link = Some(value.clone()),
            b"size" => head.size = number()?,
            b"uid" => head.uid = number()?,
            b"gid" => head.gid = number()?,
            b"mtime" => head.mtime = number()?,
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every piece of `archive` fed `step` bytes at a time.
    fn scan(archive: &[u8], step: usize) -> (Vec<Head>, Vec<u8>) {
        let (mut scanner, mut heads, mut data) = (Scanner::default(), Vec::new(), Vec::new());
        for part in archive.chunks(step) {
            let mut input = Bytes::copy_from_slice(part);
            while let Some(piece) = scanner.next(&mut input).unwrap() {
                match piece {
                    Piece::Head(head) => heads.push(head),
                    Piece::Data(bytes) => data.extend_from_slice(&bytes),
                    Piece::End => return (heads, data),
                }
            }
        }
        panic!("no end marker");
    }

    #[test]
    fn headers_long_names_and_data_come_out_in_any_split() {
        let mut builder = tar::Builder::new(Vec::new());
        let long = format!("dir/{}", "n".repeat(150));
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(EntryType::Directory);
        header.set_mode(0o750);
        header.set_uid(7);
        header.set_gid(8);
        header.set_size(0);
        builder
            .append_data(&mut header.clone(), "dir/", &[][..])
            .unwrap();
        header.set_entry_type(EntryType::Regular);
        header.set_mode(0o4640);
        header.set_size(700);
        builder
            .append_data(&mut header.clone(), &long, &[b'x'; 700][..])
            .unwrap();
        header.set_entry_type(EntryType::Symlink);
        header.set_size(0);
        builder
            .append_link(&mut header, "dir/link", "../elsewhere")
            .unwrap();
        let archive = builder.into_inner().unwrap();
        for step in [1, 7, 512, 100_000] {
            let (heads, data) = scan(&archive, step);
            let names: Vec<&str> = heads.iter().map(|head| head.name.as_str()).collect();
            assert_eq!(names, ["dir", long.as_str(), "dir/link"], "step {step}");
            assert_eq!((heads[0].mode, heads[0].uid, heads[0].gid), (0o750, 7, 8));
            assert_eq!((heads[1].mode, heads[1].size), (0o4640, 700));
            assert_eq!(heads[2].link.as_deref(), Some("../elsewhere"));
            assert_eq!(data, vec![b'x'; 700]);
        }
    }

    #[test]
    fn pax_records_override_the_header_and_garbage_is_refused() {
        let mut records = Vec::new();
        for (key, value) in [("path", "a/pax-name"), ("uid", "3000000")] {
            let line = format!(" {key}={value}\n");
            let length = line.len() + 2;
            records.extend_from_slice(format!("{length}{line}").as_bytes());
        }
        let mut builder = tar::Builder::new(Vec::new());
        let mut pax = tar::Header::new_ustar();
        pax.set_entry_type(EntryType::XHeader);
        pax.set_size(records.len() as u64);
        builder
            .append_data(&mut pax, "PaxHeaders/x", &records[..])
            .unwrap();
        let mut file = tar::Header::new_ustar();
        file.set_size(3);
        file.set_mode(0o644);
        file.set_uid(0);
        file.set_gid(0);
        file.set_mtime(0);
        builder
            .append_data(&mut file, "short", &b"abc"[..])
            .unwrap();
        let (heads, data) = scan(&builder.into_inner().unwrap(), 100);
        assert_eq!(
            (heads[0].name.as_str(), heads[0].uid),
            ("a/pax-name", 3_000_000)
        );
        assert_eq!(data, b"abc");
        let mut garbage = Bytes::from(vec![b'g'; 1024]);
        assert!(Scanner::default().next(&mut garbage).is_err());
    }
}
