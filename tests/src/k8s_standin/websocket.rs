//! Stand-in API server: the server side of a WebSocket (RFC 6455), as
//! much as `pods/exec` needs: the handshake's accept key, and whole
//! messages read (masked, perhaps fragmented) and written (unmasked). No
//! extensions. Written out here so the stand-in shares no WebSocket code
//! with the client it tests.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

pub const BINARY: u8 = 0x2;
pub const CLOSE: u8 = 0x8;
const CONTINUATION: u8 = 0x0;
const PING: u8 = 0x9;
const PONG: u8 = 0xA;

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    base64(&sha1(format!("{key}{GUID}").as_bytes()))
}

fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut message = data.to_vec();
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in message.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, word) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let temp = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*word);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, temp);
        }
        for (state, value) in h.iter_mut().zip([a, b, c, d, e]) {
            *state = state.wrapping_add(value);
        }
    }
    let mut out = [0u8; 20];
    for (i, word) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&word.to_be_bytes());
    }
    out
}

fn base64(data: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let bytes = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One message from the client: its opcode and its whole payload.
pub struct Message {
    pub opcode: u8,
    pub payload: Vec<u8>,
}

/// The largest message the stand-in takes (the client's frames are far smaller).
const MAX_MESSAGE: u64 = 16 << 20;

/// Reads the next data or close message, answering pings on the way.
/// `None` at the end of the connection.
pub async fn read_message<R, W>(reader: &mut R, writer: &tokio::sync::Mutex<W>) -> Option<Message>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut message: Option<Message> = None;
    loop {
        let (fin, opcode, payload) = read_frame(reader).await?;
        match opcode {
            PING => {
                write_frame(&mut *writer.lock().await, PONG, &payload)
                    .await
                    .ok()?;
                continue;
            }
            PONG => continue,
            CONTINUATION => message.as_mut()?.payload.extend_from_slice(&payload),
            _ => message = Some(Message { opcode, payload }),
        }
        if fin {
            return message;
        }
    }
}

async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Option<(bool, u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    reader.read_exact(&mut head).await.ok()?;
    let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0F);
    let masked = head[1] & 0x80 != 0;
    let length = match head[1] & 0x7F {
        126 => u64::from(reader.read_u16().await.ok()?),
        127 => reader.read_u64().await.ok()?,
        short => u64::from(short),
    };
    if length > MAX_MESSAGE {
        return None;
    }
    let mut mask = [0u8; 4];
    if masked {
        reader.read_exact(&mut mask).await.ok()?;
    }
    let mut payload = vec![0u8; length as usize];
    reader.read_exact(&mut payload).await.ok()?;
    if masked {
        for (i, byte) in payload.iter_mut().enumerate() {
            *byte ^= mask[i % 4];
        }
    }
    Some((fin, opcode, payload))
}

/// Writes one whole, unmasked frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    opcode: u8,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut frame = vec![0x80 | opcode];
    match payload.len() {
        short @ 0..=125 => frame.push(short as u8),
        medium @ 126..=65535 => {
            frame.push(126);
            frame.extend_from_slice(&(medium as u16).to_be_bytes());
        }
        long => {
            frame.push(127);
            frame.extend_from_slice(&(long as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(payload);
    writer.write_all(&frame).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"a"), "YQ==");
    }
}
