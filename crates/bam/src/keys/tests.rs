//! Key tests: golden cases from the reference document and from samtools
//! 1.24 runs, and property tests that each encoding orders records exactly
//! as the direct comparators in `reference.rs` do.

use std::cmp::Ordering;

use proptest::prelude::*;

use super::reference::{cmp_mid, reference_cmp, strnum_cmp, RefCtx};
use super::testrec::Rec;
use super::*;

fn key(enc: &KeyEncoder, rec: &Rec) -> Result<Vec<u8>, KeyError> {
    let bytes = rec.bytes();
    let mut out = vec![0xAA; 3]; // encode must clear it
    enc.encode(RecordRef::new(&bytes), &mut out)?;
    Ok(out)
}

fn natural(name: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    put_natural_name(name, &mut v);
    v
}

fn mid_key(mid: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    put_molecular_id(mid, &mut v);
    v
}

/// Stable sort of names by their `-n`/`-N` keys (all flags 4).
fn sort_names(names: &[&str], natural: bool) -> Vec<String> {
    let enc = KeyEncoder::new(SortOrder::Name { natural }, 1, &[]);
    let mut keyed: Vec<(Vec<u8>, &str)> = names
        .iter()
        .map(|n| (key(&enc, &Rec::new(n.as_bytes())).unwrap(), *n))
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, n)| n.to_string()).collect()
}

/// E4 of the reference document, in input order.
const E4: &str = "a1 a01 a001 a10 a9 a7b a12b A1 a ab a0 a00 x1y10 x1y2 x01y2 r1.10 r1.2 \
                  a1b a01c a9f a10a 007 7 0 00 a-1 a+1 a_1 a1_";

#[test]
fn e4_natural_matches_samtools_1_24() {
    // Output of pysam 0.24.1 `samtools sort -n` on the E4 names.
    let want = "0 00 007 7 A1 a a+1 a-1 a0 a00 a1 a01 a001 a1_ a1b a01c a7b a9 a9f a10 \
                a10a a12b a_1 ab r1.2 r1.10 x1y2 x01y2 x1y10";
    let names: Vec<&str> = E4.split_whitespace().collect();
    assert_eq!(sort_names(&names, true).join(" "), want);
}

#[test]
fn e4_lexicographic_matches_samtools_1_24() {
    // Output of pysam 0.24.1 `samtools sort -N` on the E4 names.
    let want = "0 00 007 7 A1 a a+1 a-1 a0 a00 a001 a01 a01c a1 a10 a10a a12b a1_ a1b \
                a7b a9 a9f a_1 ab r1.10 r1.2 x01y2 x1y10 x1y2";
    let names: Vec<&str> = E4.split_whitespace().collect();
    assert_eq!(sort_names(&names, false).join(" "), want);
}

#[test]
fn leading_zero_names_get_identical_keys() {
    assert_eq!(natural(b"a01"), natural(b"a1"));
    assert_eq!(natural(b"x01y2"), natural(b"x1y02"));
    assert_eq!(natural(b"00"), natural(b"0"));
    assert_ne!(natural(b"a0"), natural(b"a"));
}

#[test]
fn name_flag_key_orders_primary_supplementary_secondary() {
    let order: Vec<u16> = vec![0, 0x800, 0x100, 0x900, 0x40, 0x840, 0x140, 0x80, 0xC0];
    let keys: Vec<u16> = order
        .iter()
        .map(|&f| name_flag_key(f | 0x1 | 0x10 | 0x4))
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
}

#[test]
fn coordinate_keys_are_8_bytes_and_put_unplaced_last() {
    let enc = KeyEncoder::new(SortOrder::Coordinate, 3, &[]);
    assert!(enc.is_fixed8());
    let recs = [
        Rec::new(b"a").at(0, 5, 0),
        Rec::new(b"b").at(0, 5, 0x10),
        Rec::new(b"c").at(0, 6, 0x4),
        Rec::new(b"d").at(2, i32::MAX - 1, 0x10),
        Rec::new(b"e").at(-1, -1, 0x4),
        Rec::new(b"f").at(-1, -1, 0x14),
        Rec::new(b"g").at(-1, 10, 0x4),
    ];
    let keys: Vec<Vec<u8>> = recs.iter().map(|r| key(&enc, r).unwrap()).collect();
    assert!(keys.iter().all(|k| k.len() == 8));
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    assert_eq!(keys[4], (3u64 << 33).to_be_bytes()); // tid n_ref, POS 0, forward
}

#[test]
fn tag_types_follow_e5() {
    // E5 of the reference document: missing < A < B < H/Z < numbers, int 10
    // ties float 10 and falls to coordinate.
    let enc = KeyEncoder::new(
        SortOrder::Tag {
            tag: b"XT".to_vec(),
            secondary: TagSecondary::Coordinate,
        },
        2,
        &[],
    );
    let f = |v: f32| v.to_le_bytes();
    let i = |v: i32| v.to_le_bytes();
    let recs = [
        Rec::new(b"m1").at(0, 0, 0),
        Rec::new(b"m2").at(0, 6, 0),
        Rec::new(b"A1").at(0, 0, 0).raw(b"XT", b'A', b"b"),
        Rec::new(b"A2").at(0, 0, 0).raw(b"XT", b'A', b"z"),
        Rec::new(b"B1")
            .at(0, 0, 0)
            .raw(b"XT", b'B', &[b'i', 1, 0, 0, 0, 5, 0, 0, 0]),
        Rec::new(b"B2")
            .at(0, 1, 0)
            .raw(b"XT", b'B', &[b'c', 2, 0, 0, 0, 1, 2]),
        Rec::new(b"Z0").at(0, 0, 0).z(b"XT", b""),
        Rec::new(b"H1").at(0, 0, 0).raw(b"XT", b'H', b"1AE3\0"),
        Rec::new(b"Z1").at(0, 0, 0).z(b"XT", b"ABC"),
        Rec::new(b"Z2").at(0, 0, 0).z(b"XT", b"abc"),
        Rec::new(b"Z3").at(0, 0, 0).z(b"XT", b"abd"),
        Rec::new(b"i1")
            .at(0, 0, 0)
            .raw(b"XT", b'c', &[(-3i8) as u8]),
        Rec::new(b"f1").at(0, 0, 0).raw(b"XT", b'f', &f(9.5)),
        Rec::new(b"i2").at(0, 4, 0).raw(b"XT", b'C', &[10]),
        Rec::new(b"f2").at(0, 5, 0).raw(b"XT", b'f', &f(10.0)),
        Rec::new(b"i3").at(1, 4, 0).raw(b"XT", b'i', &i(10)),
        Rec::new(b"i4")
            .at(-1, -1, 4)
            .raw(b"XT", b'S', &10u16.to_le_bytes()),
        Rec::new(b"I1")
            .at(0, 0, 0)
            .raw(b"XT", b'I', &u32::MAX.to_le_bytes()),
    ];
    let keys: Vec<Vec<u8>> = recs.iter().map(|r| key(&enc, r).unwrap()).collect();
    for (w, r) in keys.windows(2).zip(recs.windows(2)) {
        assert!(w[0] < w[1], "{:?} !< {:?}", r[0].name, r[1].name);
    }
}

#[test]
fn short_tag_matches_nothing_and_long_tag_uses_two_bytes() {
    let rec = Rec::new(b"r").at(0, 0, 0).raw(b"XT", b'A', b"q");
    let with = |t: &[u8]| {
        let order = SortOrder::Tag {
            tag: t.to_vec(),
            secondary: TagSecondary::Coordinate,
        };
        key(&KeyEncoder::new(order, 1, &[]), &rec).unwrap()
    };
    assert_eq!(with(b"X")[0], TAG_MISSING);
    assert_eq!(with(b"")[0], TAG_MISSING);
    assert_eq!(with(b"XTQ"), with(b"XT"));
    assert_eq!(with(b"XT")[..2], [TAG_CHAR, b'q']);
}

#[test]
fn nan_and_negative_zero_placement() {
    let nan = ordered_f64(f64::NAN);
    assert_eq!(ordered_f64(-0.0), ordered_f64(0.0));
    assert_eq!(ordered_f64(-f64::NAN), nan);
    assert!(ordered_f64(f64::INFINITY) < nan);
    assert!(ordered_f64(f64::NEG_INFINITY) < ordered_f64(-1e300));
    assert!(ordered_f64(-1.0) < ordered_f64(-0.5));
    assert!(ordered_f64(u32::MAX as f64) < ordered_f64(4294967295.5));
}

#[test]
fn template_coordinate_verified_1_24_cases() {
    // pysam 0.24.1: `5H10M` ties `10M` at the same POS (hard clips
    // ignored), `5S5M` sorts before `10M`, and CB orders before the name.
    let enc = KeyEncoder::new(SortOrder::TemplateCoordinate, 1, &[]);
    let k = |r: Rec| key(&enc, &r).unwrap();
    let plain = k(Rec::new(b"r1").at(0, 99, 0).cigar("10M"));
    let hard = k(Rec::new(b"r2").at(0, 99, 0).cigar("5H10M"));
    let soft = k(Rec::new(b"r3").at(0, 99, 0).cigar("5S5M"));
    assert!(soft < plain && plain < hard);
    assert_eq!(plain[..26], hard[..26]);
    let rev_hard = k(Rec::new(b"h1").at(0, 299, 0x10).cigar("10M5H"));
    let rev = k(Rec::new(b"h2").at(0, 299, 0x10).cigar("10M"));
    assert!(rev_hard < rev);
    let cb = |name: &[u8], cb: &[u8]| k(Rec::new(name).at(0, 199, 0).cigar("10M").z(b"CB", cb));
    assert!(k(Rec::new(b"c3").at(0, 199, 0).cigar("10M")) < cb(b"c1", b"AAA"));
    assert!(cb(b"c2", b"AAA") < cb(b"c0", b"BBB"));
}

#[test]
fn template_coordinate_errors_mirror_samtools() {
    let enc = KeyEncoder::new(SortOrder::TemplateCoordinate, 1, &[]);
    let paired = || Rec::new(b"m1").at(0, 99, 0x41).mate(0, 199).cigar("10M");
    let e = key(&enc, &paired()).unwrap_err();
    assert_eq!(
        e.samtools_message(),
        "no MC tag. Please run samtools fixmate on file first."
    );
    assert_eq!(
        e,
        KeyError::MissingMateCigar {
            read_name: "m1".into()
        }
    );
    let e = key(&enc, &paired().raw(b"MC", b'i', &[1, 0, 0, 0])).unwrap_err();
    assert!(matches!(e, KeyError::MateCigarWrongType { .. }));
    let ok = paired().z(b"MC", b"10M");
    assert!(key(&enc, &ok.clone().raw(b"MC", b'H', b"10M\0")).is_ok());
    let e = key(&enc, &ok.clone().raw(b"CB", b'A', b"x")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "CB tag wrong type (not a string). (read \"m1\")"
    );
    let e = key(&enc, &ok.raw(b"MI", b'i', &[1, 0, 0, 0])).unwrap_err();
    assert!(matches!(e, KeyError::MolecularIdWrongType { .. }));
    // Mate unmapped: MC not needed.
    assert!(key(&enc, &Rec::new(b"u").at(0, 5, 0x49).cigar("3M")).is_ok());
}

#[test]
fn molecular_id_rule() {
    assert_eq!(mid_key(b"12/A"), mid_key(b"12/B"));
    assert_eq!(mid_key(b"12/A"), mid_key(b"12"));
    assert_ne!(mid_key(b"12/AB"), mid_key(b"12"));
    assert_eq!(mid_key(b"a//"), mid_key(b"a"));
    assert!(mid_key(b"1") < mid_key(b"12"));
    // Signed char: 0x80 sorts before 'A'.
    assert!(mid_key(b"\x80") < mid_key(b"A"));
    assert_eq!(cmp_mid(b"\x80", b"A"), Ordering::Less);
}

#[test]
fn mate_cigar_walks() {
    assert_eq!(mate_unclipped_start(99, b"5S10M"), 95);
    assert_eq!(mate_unclipped_start(99, b"3H5S10M"), 95);
    assert_eq!(mate_unclipped_start(99, b"*"), 100);
    assert_eq!(mate_unclipped_start(99, b"S10M"), 99);
    assert_eq!(mate_unclipped_end(99, b"5S10M3S2H"), 112);
    assert_eq!(mate_unclipped_end(99, b"10M5"), 109);
    assert_eq!(mate_unclipped_end(99, b"2I"), 99);
}

/// Names over an alphabet dense in digits, zeros, punctuation and the
/// bytes around '0' and '9'.
fn arb_name() -> impl Strategy<Value = Vec<u8>> {
    let alphabet: &[u8] = b"0000011123899aAbz+-_.:/;\x7f\x80\xff";
    prop::collection::vec(prop::sample::select(alphabet.to_vec()), 0..14)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn natural_key_matches_strnum_cmp(a in arb_name(), b in arb_name()) {
        prop_assert_eq!(natural(&a).cmp(&natural(&b)), strnum_cmp(&a, &b));
    }

    #[test]
    fn mid_key_matches_compare_mid(
        a in prop::collection::vec(prop::sample::select(b"/ab1\x7f\x80\xff".to_vec()), 0..6),
        b in prop::collection::vec(prop::sample::select(b"/ab1\x7f\x80\xff".to_vec()), 0..6),
    ) {
        prop_assert_eq!(mid_key(&a).cmp(&mid_key(&b)), cmp_mid(&a, &b));
    }
}

/// One aux tag a random record may carry.
fn arb_tag() -> impl Strategy<Value = (Vec<u8>, u8, Vec<u8>)> {
    let xt = prop_oneof![
        prop::sample::select(vec![-3i64, -1, 0, 1, 2, 10, 200, 70000]).prop_flat_map(|v| {
            let typed: Vec<(u8, Vec<u8>)> = [
                (b'c', i8::try_from(v).ok().map(|x| vec![x as u8])),
                (b'C', u8::try_from(v).ok().map(|x| vec![x])),
                (
                    b's',
                    i16::try_from(v).ok().map(|x| x.to_le_bytes().to_vec()),
                ),
                (
                    b'S',
                    u16::try_from(v).ok().map(|x| x.to_le_bytes().to_vec()),
                ),
                (
                    b'i',
                    i32::try_from(v).ok().map(|x| x.to_le_bytes().to_vec()),
                ),
                (
                    b'I',
                    u32::try_from(v).ok().map(|x| x.to_le_bytes().to_vec()),
                ),
            ]
            .into_iter()
            .filter_map(|(t, b)| b.map(|b| (t, b)))
            .collect();
            prop::sample::select(typed)
        }),
        prop::sample::select(vec![
            -0.0f32,
            0.0,
            1.0,
            2.5,
            10.0,
            -3.0,
            1e30,
            f32::INFINITY
        ])
        .prop_map(|v| (b'f', v.to_le_bytes().to_vec())),
        prop::sample::select(b"abZ\xff".to_vec()).prop_map(|c| (b'A', vec![c])),
        prop::sample::select(vec![&b""[..], b"a", b"ab", b"B", b"\xe9"]).prop_flat_map(|s| {
            let mut z = s.to_vec();
            z.push(0);
            prop::sample::select(vec![b'Z', b'H']).prop_map(move |t| (t, z.clone()))
        }),
        prop::sample::select(vec![vec![b'c', 1, 0, 0, 0, 7], vec![b'S', 0, 0, 0, 0]])
            .prop_map(|b| (b'B', b)),
    ];
    let zs = |vals: Vec<&'static [u8]>| {
        prop::sample::select(vals).prop_map(|v| {
            let mut z = v.to_vec();
            z.push(0);
            z
        })
    };
    prop_oneof![
        4 => xt.prop_map(|(t, v)| (b"XT".to_vec(), t, v)),
        3 => zs(vec![b"g1", b"g2", b"g3", b"g4", b"gX"]).prop_map(|v| (b"RG".to_vec(), b'Z', v)),
        3 => zs(vec![b"10M", b"5S10M", b"3H2S5M", b"10M5S", b"4M2D4M1S2H", b"*", b"5", b"10M5", b"S5M", b"2I"])
            .prop_map(|v| (b"MC".to_vec(), b'Z', v)),
        2 => zs(vec![b"", b"AAA", b"AAC", b"AA"]).prop_map(|v| (b"CB".to_vec(), b'Z', v)),
        2 => zs(vec![b"1", b"1/A", b"1/B", b"12", b"1/", b"\x801", b"a//"]).prop_map(|v| (b"MI".to_vec(), b'Z', v)),
        1 => prop::sample::select(vec![&b"MC"[..], b"CB", b"MI", b"RG"])
            .prop_map(|t| (t.to_vec(), b'i', vec![1, 0, 0, 0])),
    ]
}

fn arb_rec() -> impl Strategy<Value = Rec> {
    let pos = prop_oneof![6 => -1i32..40, 1 => Just(i32::MAX - 1)];
    let cigar = prop::collection::vec((0u8..9, 0u32..8), 0..5);
    (
        arb_name(),
        any::<u16>(),
        (-1i32..3, pos.clone(), cigar),
        (-1i32..3, pos),
        prop::collection::vec(arb_tag(), 0..5),
    )
        .prop_map(|(name, flag, (tid, p, cigar), (mtid, mpos), tags)| {
            let mut r = Rec::new(&name).at(tid, p, flag & 0xfff).mate(mtid, mpos);
            r.cigar = cigar;
            for (tag, ty, val) in tags {
                r = r.raw(&[tag[0], tag[1]], ty, &val);
            }
            r
        })
}

fn libraries() -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (b"g1".to_vec(), b"libB".to_vec()),
        (b"g2".to_vec(), b"libA".to_vec()),
        (b"g4".to_vec(), b"libB".to_vec()),
        (b"g1".to_vec(), b"ignored: first line wins".to_vec()),
    ]
}

/// Checks every pair of `recs` against the reference comparator.
fn check_order(order: SortOrder, recs: &[Rec]) -> Result<(), TestCaseError> {
    let libs = libraries();
    let enc = KeyEncoder::new(order.clone(), 3, &libs);
    let ctx = RefCtx {
        order: &order,
        libraries: &libs,
    };
    let bytes: Vec<Vec<u8>> = recs.iter().map(Rec::bytes).collect();
    let keys: Vec<Result<Vec<u8>, KeyError>> = recs.iter().map(|r| key(&enc, r)).collect();
    for (i, a) in bytes.iter().enumerate() {
        for (j, b) in bytes.iter().enumerate() {
            let want = reference_cmp(&ctx, RecordRef::new(a), RecordRef::new(b));
            match (&keys[i], &keys[j], want) {
                (Ok(ka), Ok(kb), Ok(w)) => {
                    prop_assert_eq!(ka.cmp(kb), w, "{:?}\nvs {:?}", recs[i], recs[j])
                }
                (Err(e), _, Err(w)) | (Ok(_), Err(e), Err(w)) => prop_assert_eq!(e, &w),
                (ka, kb, w) => prop_assert!(false, "key {:?} / {:?} but reference {:?}", ka, kb, w),
            }
        }
    }
    if order == SortOrder::Coordinate {
        prop_assert!(keys
            .iter()
            .all(|k| k.as_ref().map(|k| k.len() == 8).unwrap_or(false)));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn coordinate_keys_match_reference(recs in prop::collection::vec(arb_rec(), 2..12)) {
        // The reference maps tid -1 to u64::MAX; the key to n_ref. Same
        // order for tids in range.
        check_order(SortOrder::Coordinate, &recs)?;
    }

    #[test]
    fn name_keys_match_reference(recs in prop::collection::vec(arb_rec(), 2..12), nat in any::<bool>()) {
        check_order(SortOrder::Name { natural: nat }, &recs)?;
    }

    #[test]
    fn tag_keys_match_reference(
        recs in prop::collection::vec(arb_rec(), 2..12),
        sec in prop_oneof![
            Just(TagSecondary::Coordinate),
            Just(TagSecondary::Name { natural: true }),
            Just(TagSecondary::Name { natural: false }),
        ],
        tag in prop::sample::select(vec![&b"XT"[..], b"XTY", b"X", b"RG", b"MI"]),
    ) {
        check_order(SortOrder::Tag { tag: tag.to_vec(), secondary: sec }, &recs)?;
    }

    #[test]
    fn template_keys_match_reference(recs in prop::collection::vec(arb_rec(), 2..12)) {
        check_order(SortOrder::TemplateCoordinate, &recs)?;
    }

    #[test]
    fn minimiser_keys_match_reference(
        recs in prop::collection::vec(arb_rec(), 2..12),
        kmer in 1u32..8,
        reverse in any::<bool>(),
        squash in any::<bool>(),
    ) {
        // Test records are all-A reads of their CIGAR's query length, so the
        // keys differ by whether the read has a k-mer, where, and strand.
        let m = minimiser::Minimiser { kmer, reverse, squash, index: None };
        check_order(SortOrder::Minimiser(m), &recs)?;
    }
}
