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
//! The first landmark is the compression header's length, made for the
//! rewritten header; the slice header is the last thing before the data
//! that follows it. Nothing else depends on absolute offsets (the `.crai`
//! lines do; the writer adds the container's offset to what
//! [`SliceInfo`] says when it writes the container).
//!
//! The read group is also settled here. For an RG tag that names an @RG of
//! the header, noodles-cram 0.102 sets the read-group data series *and*
//! keeps the tag (tag dictionary key `RGZ`), so readers would give RG
//! twice; the `RGZ` key is taken out of the tag dictionary and the tag
//! encoding map, and its block dropped, leaving the series, from which
//! readers add RG last (where htslib puts it for its own CRAMs). An RG tag
//! that is to stay a tag (a name not in the header, or a type other than
//! Z, which htslib stores verbatim and noodles refuses) reaches noodles
//! under a placeholder tag (`encode.rs`) and is renamed RG here.
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

/// The content id (and tag encoding map key) of the tag set key
/// `tag` + `ty` (CRAM 3 §8.4: the tag's two characters and its BAM type
/// letter, big-endian in 24 bits).
fn tag_key_id(tag: [u8; 2], ty: u8) -> u32 {
    (tag[0] as u32) << 16 | (tag[1] as u32) << 8 | ty as u32
}

/// The key noodles-cram writes for an RG tag taken as the read group.
const RG_Z: u32 = (b'R' as u32) << 16 | (b'G' as u32) << 8 | b'Z' as u32;

/// The tag dictionary (preservation map key TD, §8.4.1: lines of 3-byte
/// tag keys, each line ended by a NUL) with every `RGZ` entry removed and
/// every `placeholder` tag renamed RG (its type kept). Line numbers are
/// unchanged (records name their line through the TL series), so a line
/// may become empty or equal to another.
fn rewritten_tag_sets(td: &[u8], placeholder: Option<[u8; 2]>) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(td.len());
    let mut at = 0;
    while at < td.len() {
        if td[at] == 0 {
            out.push(0);
            at += 1;
            continue;
        }
        let key = td.get(at..at + 3).ok_or("tag dictionary: truncated key")?;
        at += 3;
        if key == b"RGZ" {
            continue;
        }
        if Some([key[0], key[1]]) == placeholder {
            out.extend_from_slice(&[b'R', b'G', key[2]]);
        } else {
            out.extend_from_slice(key);
        }
    }
    if td.last().is_some_and(|&b| b != 0) {
        return Err("tag dictionary: last line not ended".into());
    }
    Ok(out)
}

/// The preservation map (its content, after the size) with its tag
/// dictionary rewritten by [`rewritten_tag_sets`]; the other entries (the
/// ones noodles-cram 0.102 writes: RN, AP, RR, SM) are copied.
fn rewritten_preservation_map(
    data: &[u8],
    placeholder: Option<[u8; 2]>,
) -> Result<Vec<u8>, String> {
    let mut at = 0;
    let count = read_itf8(data, &mut at)?;
    let mut out = Vec::with_capacity(data.len());
    write_itf8(&mut out, count);
    for _ in 0..count {
        let key = data
            .get(at..at + 2)
            .ok_or("preservation map: truncated key")?;
        at += 2;
        out.extend_from_slice(key);
        let fixed = match key {
            b"RN" | b"AP" | b"RR" => 1,
            b"SM" => 5,
            b"TD" => {
                let n = read_itf8(data, &mut at)? as usize;
                let td = data
                    .get(at..at + n)
                    .ok_or("preservation map: truncated tag dictionary")?;
                at += n;
                let td = rewritten_tag_sets(td, placeholder)?;
                write_itf8(&mut out, td.len() as u32);
                out.extend_from_slice(&td);
                continue;
            }
            _ => {
                return Err(format!(
                    "preservation map: unexpected key {:?}",
                    String::from_utf8_lossy(key)
                ))
            }
        };
        out.extend_from_slice(
            data.get(at..at + fixed)
                .ok_or("preservation map: truncated value")?,
        );
        at += fixed;
    }
    if at != data.len() {
        return Err(format!(
            "preservation map ends at {at} of {} bytes",
            data.len()
        ));
    }
    Ok(out)
}

/// The compression header (§8.4) as readers should see it:
///
/// * its tag dictionary and tag encoding map without the `RGZ` tag that
///   noodles-cram 0.102 keeps for a record whose RG it also stores as the
///   read-group series (which readers add back, last), so RG is read once;
///   its block of RG strings is then unused and left out ([`RG_Z`] names it);
/// * the `placeholder` tag, under which the encoder hands noodles an RG
///   that is to stay a tag (a name not in the header, or not of type Z, as
///   htslib stores it), renamed RG in both; its encoding still names the
///   placeholder's block;
/// * its tag encoding map in content-id order: noodles writes it from a
///   `HashMap`, in an order that changes from run to run.
fn rewritten_compression_header(
    data: &[u8],
    placeholder: Option<[u8; 2]>,
) -> Result<Vec<u8>, String> {
    let mut at = 0;
    let n = read_itf8(data, &mut at)? as usize;
    let map = data.get(at..at + n).ok_or("truncated preservation map")?;
    at += n;
    let map = rewritten_preservation_map(map, placeholder)?;
    let mut out = Vec::with_capacity(data.len());
    write_itf8(&mut out, map.len() as u32);
    out.extend_from_slice(&map);
    // Data series encoding map: size, then content, copied.
    let series_from = at;
    let n = read_itf8(data, &mut at)? as usize;
    at += n;
    out.extend_from_slice(
        data.get(series_from..at)
            .ok_or("truncated data series encoding map")?,
    );
    let size = read_itf8(data, &mut at)? as usize;
    let entries_end = at + size;
    let count = read_itf8(data, &mut at)?;
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let key = read_itf8(data, &mut at)?;
        let from = at;
        read_itf8(data, &mut at)?; // codec
        let params = read_itf8(data, &mut at)? as usize;
        at += params;
        let encoding = data.get(from..at).ok_or("truncated tag encoding map")?;
        let key = match placeholder {
            Some(p) if key >> 8 == tag_key_id(p, 0) >> 8 => tag_key_id(*b"RG", key as u8),
            _ if key == RG_Z => continue,
            _ => key,
        };
        entries.push((key, encoding));
    }
    if at != entries_end || entries_end != data.len() {
        return Err(format!(
            "tag encoding map ends at {at}, expected {entries_end} (compression header of {} bytes)",
            data.len()
        ));
    }
    entries.sort_by_key(|&(key, _)| key);
    let mut map = Vec::with_capacity(size);
    write_itf8(&mut map, entries.len() as u32);
    for (key, encoding) in entries {
        write_itf8(&mut map, key);
        map.extend_from_slice(encoding);
    }
    write_itf8(&mut out, map.len() as u32);
    out.extend_from_slice(&map);
    Ok(out)
}

/// The slice header with its record counter set to `counter`, the
/// external block `dropped` (if any) left out of its block count and list
/// of content ids, and that list (§8.5) in ascending order, as the blocks
/// are written.
fn renumbered_slice_header(
    data: &[u8],
    counter: u64,
    dropped: Option<u32>,
) -> Result<Vec<u8>, String> {
    let mut at = 0;
    skip_itf8(data, &mut at, 4)?;
    let mut out = data[..at].to_vec();
    write_ltf8(&mut out, counter);
    at += ltf8_len(*data.get(at).ok_or("truncated slice header")?);
    let blocks = read_itf8(data, &mut at)?;
    let n = read_itf8(data, &mut at)?;
    let mut ids = (0..n)
        .map(|_| read_itf8(data, &mut at))
        .collect::<Result<Vec<_>, _>>()?;
    let before = ids.len();
    ids.retain(|&id| Some(id) != dropped);
    let removed = (before - ids.len()) as u32;
    ids.sort_unstable();
    write_itf8(
        &mut out,
        blocks
            .checked_sub(removed)
            .ok_or("slice header: block count below its content ids")?,
    );
    write_itf8(&mut out, ids.len() as u32);
    for id in ids {
        write_itf8(&mut out, id);
    }
    out.extend_from_slice(data.get(at..).ok_or("truncated slice header")?);
    Ok(out)
}

/// The first container of `stream` (a CRAM 3 stream with no file
/// definition or header container, one slice per container), its record
/// counter set to `counter`; the rest of `stream` must be the EOF
/// container. Its compression header is rewritten by
/// [`rewritten_compression_header`] (RG read once; `placeholder` tags
/// renamed RG), and the block of RG strings no tag encoding names any more
/// is left out. The parts noodles-cram orders by `HashMap` iteration (the
/// compression header's tag encoding map, the external blocks and the
/// slice header's list of them) are put in content-id order, so that the
/// same records always give the same bytes; readers find blocks and tag
/// encodings by content id, not by position. The container header's
/// length, block count and landmark, and every rewritten block's sizes and
/// CRC32, are made for the new bytes.
pub(crate) fn renumbered_container(
    stream: &[u8],
    counter: u64,
    placeholder: Option<[u8; 2]>,
) -> Result<(Vec<u8>, SliceInfo), String> {
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
    let bases_at = at;
    at += ltf8_len(*stream.get(at).ok_or("truncated container header")?);
    let bases_end = at;
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
    let mut external: Vec<&Block> = blocks[3..]
        .iter()
        .filter(|k| k.content_id != RG_Z)
        .collect();
    let dropped = (external.len() + 3 < blocks.len()).then_some(RG_Z);
    external.sort_by_key(|k| k.content_id);
    let mut new_body = raw_block(
        COMPRESSION_HEADER,
        blocks[0].content_id,
        &rewritten_compression_header(blocks[0].data, placeholder)?,
    );
    let landmark = new_body.len() as u32;
    new_body.extend_from_slice(&raw_block(
        SLICE_HEADER,
        blocks[1].content_id,
        &renumbered_slice_header(blocks[1].data, counter, dropped)?,
    ));
    new_body.extend_from_slice(blocks[2].bytes);
    for k in &external {
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
    out.extend_from_slice(&stream[bases_at..bases_end]);
    write_itf8(&mut out, (3 + external.len()) as u32);
    write_itf8(&mut out, 1);
    write_itf8(&mut out, landmark);
    let c = crc32(&out);
    out.extend_from_slice(&c.to_le_bytes());
    let size = new_body.len() as u32 - landmark;
    out.extend_from_slice(&new_body);
    let mut at = 0;
    let mut field = || read_itf8(blocks[1].data, &mut at);
    let info = SliceInfo {
        reference: field()? as i32,
        start: field()? as i32,
        span: field()? as i32,
        landmark,
        size,
    };
    Ok((out, info))
}

/// What a `.crai` line says of a slice (CRAM 3 §8.5 slice header fields;
/// offsets within the container as written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SliceInfo {
    /// Reference sequence id: -1 unmapped, -2 several references.
    pub reference: i32,
    /// 1-based alignment start and span (0 for unmapped or several).
    pub start: i32,
    pub span: i32,
    /// Offset of the slice from the end of the container header.
    pub landmark: u32,
    /// Bytes of the slice: its header block and its data blocks.
    pub size: u32,
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
    fn tag_dictionary_loses_header_rg_and_renames_the_placeholder() {
        let td = b"XIiRGZMCZ\0RGZ\0rgZXIi\0rgC\0";
        assert_eq!(
            rewritten_tag_sets(td, Some(*b"rg")).unwrap(),
            b"XIiMCZ\0\0RGZXIi\0RGC\0"
        );
        assert_eq!(
            rewritten_tag_sets(td, None).unwrap(),
            b"XIiMCZ\0\0rgZXIi\0rgC\0"
        );
        assert!(rewritten_tag_sets(b"XIiRG", None).is_err());
        assert!(rewritten_tag_sets(b"XIi", None).is_err());
    }

    /// A compression header as noodles-cram writes one: preservation map
    /// (RN, AP, RR, SM, TD), a data series map, and a tag encoding map in
    /// `order`, each entry `key, codec 1, 1 parameter byte (the key's low
    /// byte)`.
    fn compression_header(td: &[u8], order: &[u32]) -> Vec<u8> {
        let mut pm = vec![5];
        pm.extend_from_slice(b"RN\x01AP\x00RR\x01SM\x1b\x1b\x1b\x1b\x1bTD");
        write_itf8(&mut pm, td.len() as u32);
        pm.extend_from_slice(td);
        let mut out = Vec::new();
        write_itf8(&mut out, pm.len() as u32);
        out.extend_from_slice(&pm);
        out.extend_from_slice(&[3, 1, 0, 0]); // data series map: made up
        let mut map = Vec::new();
        write_itf8(&mut map, order.len() as u32);
        for &key in order {
            write_itf8(&mut map, key);
            map.extend_from_slice(&[1, 1, key as u8]);
        }
        write_itf8(&mut out, map.len() as u32);
        out.extend_from_slice(&map);
        out
    }

    #[test]
    fn compression_header_reads_rg_once() {
        let xi = tag_key_id(*b"XI", b'i');
        let rg_placeholder = tag_key_id(*b"rg", b'Z');
        let got = rewritten_compression_header(
            &compression_header(b"XIiRGZ\0rgZ\0", &[RG_Z, rg_placeholder, xi]),
            Some(*b"rg"),
        )
        .unwrap();
        // RGZ (from the series) is gone, the placeholder is RG with its own
        // encoding (parameter byte 'Z' of its key), entries in key order.
        let mut want_map = Vec::new();
        write_itf8(&mut want_map, 2);
        for (key, param) in [(RG_Z, b'Z'), (xi, b'i')] {
            write_itf8(&mut want_map, key);
            want_map.extend_from_slice(&[1, 1, param]);
        }
        let want = compression_header(b"XIi\0RGZ\0", &[]);
        let want_prefix = &want[..want.len() - 2];
        assert_eq!(&got[..want_prefix.len()], want_prefix);
        let mut tail = Vec::new();
        write_itf8(&mut tail, want_map.len() as u32);
        tail.extend_from_slice(&want_map);
        assert_eq!(&got[want_prefix.len()..], &tail[..]);
        // Without a placeholder, only the header RG goes.
        let got = rewritten_compression_header(&compression_header(b"RGZXIi\0", &[xi, RG_Z]), None)
            .unwrap();
        assert_eq!(got, compression_header(b"XIi\0", &[xi]));
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
