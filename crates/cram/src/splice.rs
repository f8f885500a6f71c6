//! Containers cut out of a CRAM stream that noodles-cram wrote for one
//! container's records, renumbered for their place in the output file and
//! put in a canonical byte order.
//!
//! noodles-cram 0.102's container writer is crate-private, so each encoding
//! job writes its records through a fresh public `Writer` into memory. Such a
//! stream (without `write_header`) is one data container followed by the EOF
//! container. The data container is self-contained (its compression header,
//! tag dictionary and substitution matrix describe its own records only); the
//! one thing in it that depends on its place in the file is the record
//! counter (CRAM 3 §7 container header, §8.5 slice header: the 0-based index
//! of the first record in the file), which the job's writer starts at 0. It
//! is rewritten here in the container header and in the slice header, with
//! their CRC32s, the slice header block's sizes and the container's length.
//! Landmarks stay valid: the first is the compression header's length, and
//! the slice header is the last thing before the data that follows it.
//! Nothing else depends on absolute offsets (a `.crai` would, but alnsort
//! writes none for CRAM; `samtools index` makes one from the file).
//!
//! noodles also writes the compression header's tag encoding map and the
//! slice's external blocks in `HashMap` order, which differs from run to
//! run; they are sorted by content id here, so that output bytes depend on
//! the records only (the `-@`/`-m` contract).

/// Length of the ITF8 value starting with `b0`.
fn itf8_len(b0: u8) -> usize {
    (b0.leading_ones() as usize).min(4) + 1
}

/// Length of the LTF8 value starting with `b0`.
fn ltf8_len(b0: u8) -> usize {
    b0.leading_ones() as usize + 1
}

fn read_itf8(buf: &[u8], at: &mut usize) -> Result<u32, String> {
    let b0 = *buf.get(*at).ok_or("truncated ITF8")?;
    let n = itf8_len(b0);
    let b = buf.get(*at..*at + n).ok_or("truncated ITF8")?;
    *at += n;
    Ok(match n {
        1 => b0 as u32,
        2 => ((b0 as u32 & 0x3f) << 8) | b[1] as u32,
        3 => ((b0 as u32 & 0x1f) << 16) | (b[1] as u32) << 8 | b[2] as u32,
        4 => ((b0 as u32 & 0x0f) << 24) | (b[1] as u32) << 16 | (b[2] as u32) << 8 | b[3] as u32,
        _ => {
            ((b0 as u32 & 0x0f) << 28)
                | (b[1] as u32) << 20
                | (b[2] as u32) << 12
                | (b[3] as u32) << 4
                | (b[4] as u32 & 0x0f)
        }
    })
}

fn write_itf8(out: &mut Vec<u8>, v: u32) {
    if v < 0x80 {
        out.push(v as u8);
    } else if v < 0x4000 {
        out.extend_from_slice(&[0x80 | (v >> 8) as u8, v as u8]);
    } else if v < 0x20_0000 {
        out.extend_from_slice(&[0xc0 | (v >> 16) as u8, (v >> 8) as u8, v as u8]);
    } else if v < 0x1000_0000 {
        out.extend_from_slice(&[
            0xe0 | (v >> 24) as u8,
            (v >> 16) as u8,
            (v >> 8) as u8,
            v as u8,
        ]);
    } else {
        out.extend_from_slice(&[
            0xf0 | ((v >> 28) & 0x0f) as u8,
            (v >> 20) as u8,
            (v >> 12) as u8,
            (v >> 4) as u8,
            (v & 0x0f) as u8,
        ]);
    }
}

fn write_ltf8(out: &mut Vec<u8>, v: u64) {
    // Bytes after the first (CRAM 3 §2.3): 0 to 8 of them hold 7, 14, 21,
    // 28, 35, 42, 49, 56 or 64 value bits.
    let extra = match v {
        _ if v < 1 << 7 => 0,
        _ if v < 1 << 14 => 1,
        _ if v < 1 << 21 => 2,
        _ if v < 1 << 28 => 3,
        _ if v < 1 << 35 => 4,
        _ if v < 1 << 42 => 5,
        _ if v < 1 << 49 => 6,
        _ if v < 1 << 56 => 7,
        _ => 8,
    };
    let prefix: u8 = !(0xffu16 >> extra) as u8;
    let first_bits = if extra >= 7 { 0 } else { v >> (8 * extra) };
    out.push(prefix | first_bits as u8);
    for i in (0..extra).rev() {
        out.push((v >> (8 * i)) as u8);
    }
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut c = flate2::Crc::new();
    c.update(bytes);
    c.sum()
}

/// Skips `n` ITF8 values.
fn skip_itf8(buf: &[u8], at: &mut usize, n: usize) -> Result<(), String> {
    for _ in 0..n {
        read_itf8(buf, at)?;
    }
    Ok(())
}

/// One block of a container body (CRAM 3 §8.1): method, content type,
/// content id, sizes, data, CRC32.
struct Block<'a> {
    bytes: &'a [u8],
    method: u8,
    content_type: u8,
    content_id: u32,
    data: &'a [u8],
}

fn read_block<'a>(body: &'a [u8], at: &mut usize) -> Result<Block<'a>, String> {
    let start = *at;
    let method = *body.get(*at).ok_or("truncated block")?;
    let content_type = *body.get(*at + 1).ok_or("truncated block")?;
    *at += 2;
    let content_id = read_itf8(body, at)?;
    let size = read_itf8(body, at)? as usize;
    read_itf8(body, at)?;
    let data = body.get(*at..*at + size).ok_or("truncated block")?;
    *at += size + 4;
    let bytes = body.get(start..*at).ok_or("truncated block")?;
    Ok(Block {
        bytes,
        method,
        content_type,
        content_id,
        data,
    })
}

/// A raw block with `data` (sizes and CRC32 made for it).
fn raw_block(content_type: u8, content_id: u32, data: &[u8]) -> Vec<u8> {
    let mut block = vec![0, content_type];
    write_itf8(&mut block, content_id);
    write_itf8(&mut block, data.len() as u32);
    write_itf8(&mut block, data.len() as u32);
    block.extend_from_slice(data);
    let c = crc32(&block);
    block.extend_from_slice(&c.to_le_bytes());
    block
}

const COMPRESSION_HEADER: u8 = 1;
const SLICE_HEADER: u8 = 2;
const EXTERNAL_DATA: u8 = 4;
const CORE_DATA: u8 = 5;

/// The compression header with its tag encoding map (§8.4) in content-id
/// order: noodles-cram 0.102 writes it from a `HashMap`, in an order that
/// changes from run to run.
fn sorted_tag_encodings(data: &[u8]) -> Result<Vec<u8>, String> {
    let mut at = 0;
    for _ in 0..2 {
        // Preservation map, data series encoding map: size, then content.
        let n = read_itf8(data, &mut at)? as usize;
        at += n;
    }
    let map_start = at;
    let size = read_itf8(data, &mut at)? as usize;
    let entries_end = at + size;
    let count = read_itf8(data, &mut at)?;
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let from = at;
        let key = read_itf8(data, &mut at)?;
        read_itf8(data, &mut at)?; // codec
        let params = read_itf8(data, &mut at)? as usize;
        at += params;
        entries.push((key, data.get(from..at).ok_or("truncated tag encoding map")?));
    }
    if at != entries_end || entries_end != data.len() {
        return Err(format!(
            "tag encoding map ends at {at}, expected {entries_end} (compression header of {} bytes)",
            data.len()
        ));
    }
    entries.sort_by_key(|&(key, _)| key);
    let mut out = data[..map_start].to_vec();
    write_itf8(&mut out, size as u32);
    write_itf8(&mut out, count);
    for (_, e) in entries {
        out.extend_from_slice(e);
    }
    Ok(out)
}

/// The slice header with its record counter set to `counter` and its block
/// content ids (§8.5) in ascending order, as the blocks are written.
fn renumbered_slice_header(data: &[u8], counter: u64) -> Result<Vec<u8>, String> {
    let mut at = 0;
    skip_itf8(data, &mut at, 4)?;
    let mut out = data[..at].to_vec();
    write_ltf8(&mut out, counter);
    at += ltf8_len(*data.get(at).ok_or("truncated slice header")?);
    let blocks_from = at;
    skip_itf8(data, &mut at, 1)?;
    out.extend_from_slice(&data[blocks_from..at]);
    let n = read_itf8(data, &mut at)?;
    let mut ids = (0..n)
        .map(|_| read_itf8(data, &mut at))
        .collect::<Result<Vec<_>, _>>()?;
    ids.sort_unstable();
    write_itf8(&mut out, n);
    for id in ids {
        write_itf8(&mut out, id);
    }
    out.extend_from_slice(data.get(at..).ok_or("truncated slice header")?);
    Ok(out)
}

/// The first container of `stream` (a CRAM 3 stream with no file
/// definition or header container, one slice per container), its record
/// counter set to `counter`; the rest of `stream` must be the EOF
/// container. The parts noodles-cram orders by `HashMap` iteration (the
/// compression header's tag encoding map, the external blocks and the
/// slice header's list of them) are put in content-id order, so that the
/// same records always give the same bytes; readers find blocks and tag
/// encodings by content id, not by position.
pub(crate) fn renumbered_container(stream: &[u8], counter: u64) -> Result<Vec<u8>, String> {
    let len = i32::from_le_bytes(
        stream
            .get(..4)
            .ok_or("truncated container header")?
            .try_into()
            .map_err(|_| "truncated container header")?,
    );
    let body_len = usize::try_from(len).map_err(|_| "negative container length")?;
    // Container header: length, reference id, start, span, record count
    // (ITF8), record counter (LTF8), bases (LTF8), block count (ITF8),
    // landmarks (ITF8 array), CRC32.
    let mut at = 4;
    skip_itf8(stream, &mut at, 4)?;
    let counter_at = at;
    at += ltf8_len(*stream.get(at).ok_or("truncated container header")?);
    let after_counter = at;
    at += ltf8_len(*stream.get(at).ok_or("truncated container header")?);
    let block_count = read_itf8(stream, &mut at)? as usize;
    let landmarks = read_itf8(stream, &mut at)? as usize;
    skip_itf8(stream, &mut at, landmarks)?;
    if landmarks != 1 {
        return Err(format!(
            "expected one slice per container, found {landmarks}"
        ));
    }
    let header_end = at;
    let body_start = header_end + 4;
    let body = stream
        .get(body_start..body_start + body_len)
        .ok_or("truncated container body")?;
    if stream.len() == body_start + body_len {
        return Err("no EOF container after the data container".into());
    }
    let mut b = 0;
    let blocks = (0..block_count)
        .map(|_| read_block(body, &mut b))
        .collect::<Result<Vec<_>, _>>()?;
    if b != body.len() {
        return Err(format!(
            "blocks end at {b} of a {}-byte container",
            body.len()
        ));
    }
    let kinds: Vec<u8> = blocks.iter().map(|k| k.content_type).collect();
    if blocks.len() < 3
        || kinds[..3] != [COMPRESSION_HEADER, SLICE_HEADER, CORE_DATA]
        || kinds[3..].iter().any(|&k| k != EXTERNAL_DATA)
        || blocks[0].method != 0
        || blocks[1].method != 0
    {
        return Err(format!("unexpected block layout (content types {kinds:?})"));
    }
    let mut new_body = raw_block(
        COMPRESSION_HEADER,
        blocks[0].content_id,
        &sorted_tag_encodings(blocks[0].data)?,
    );
    if new_body.len() != blocks[0].bytes.len() {
        return Err("compression header changed size".into());
    }
    new_body.extend_from_slice(&raw_block(
        SLICE_HEADER,
        blocks[1].content_id,
        &renumbered_slice_header(blocks[1].data, counter)?,
    ));
    new_body.extend_from_slice(blocks[2].bytes);
    let mut external: Vec<&Block> = blocks[3..].iter().collect();
    external.sort_by_key(|k| k.content_id);
    for k in external {
        new_body.extend_from_slice(k.bytes);
    }

    let mut out = Vec::with_capacity(new_body.len() + 64);
    out.extend_from_slice(
        &i32::try_from(new_body.len())
            .map_err(|_| "container too large")?
            .to_le_bytes(),
    );
    out.extend_from_slice(&stream[4..counter_at]);
    write_ltf8(&mut out, counter);
    out.extend_from_slice(&stream[after_counter..header_end]);
    let c = crc32(&out);
    out.extend_from_slice(&c.to_le_bytes());
    out.extend_from_slice(&new_body);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_ltf8(buf: &[u8]) -> u64 {
        let n = ltf8_len(buf[0]);
        let extra = n - 1;
        let mut v: u64 = if extra >= 7 {
            0
        } else {
            (buf[0] & (0xffu8 >> (extra + 1))) as u64
        };
        for b in &buf[1..n] {
            v = (v << 8) | *b as u64;
        }
        v
    }

    #[test]
    fn itf8_round_trips_at_every_width() {
        for v in [
            0,
            1,
            0x7f,
            0x80,
            0x3fff,
            0x4000,
            0x1f_ffff,
            0x20_0000,
            0x0fff_ffff,
            0x1000_0000,
            u32::MAX,
        ] {
            let mut b = Vec::new();
            write_itf8(&mut b, v);
            assert_eq!(b.len(), itf8_len(b[0]), "{v:#x}");
            let mut at = 0;
            assert_eq!(read_itf8(&b, &mut at).unwrap(), v, "{v:#x}");
        }
    }

    #[test]
    fn ltf8_round_trips_at_every_width() {
        for shift in 0..64 {
            for v in [1u64 << shift, (1u64 << shift) - 1, u64::MAX >> (63 - shift)] {
                let mut b = Vec::new();
                write_ltf8(&mut b, v);
                assert_eq!(b.len(), ltf8_len(b[0]), "{v:#x}");
                assert_eq!(read_ltf8(&b), v, "{v:#x}");
            }
        }
    }
}
