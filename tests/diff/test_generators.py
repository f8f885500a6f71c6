"""Checks on the generators themselves: a differential test is only as good as
its inputs, so each trap the inputs claim to contain is counted here, and the
mate information that --template-coordinate relies on is verified to be
consistent (samtools is not stable on contradictory mate fields)."""

from __future__ import annotations

from collections import Counter

import gen


def _records(text: str) -> list[list[str]]:
    return [line.split("\t") for line in text.splitlines() if not line.startswith("@")]


def test_deterministic():
    a = gen.header_variant_input("v15", seed=3)
    assert a == gen.header_variant_input("v15", seed=3)
    assert a != gen.header_variant_input("v15", seed=4)


def test_main_input_has_the_traps(inputs):
    recs = _records(open(inputs.sam("main")).read())
    assert len(recs) > 30_000, "main input must be big enough for -m 1M to spill"
    keys = Counter((r[2], r[3], int(r[1]) & 0x10) for r in recs)
    tied = sum(n for n in keys.values() if n > 1)
    assert tied > len(recs) // 2, f"only {tied} records share a (ref,pos,strand) key"
    xi = [next(t for t in r[11:] if t.startswith("XI:i:")) for r in recs]
    assert len(set(xi)) == len(recs), "XI must be unique per record"

    flags = [int(r[1]) for r in recs]
    unplaced = [r for r in recs if r[2] == "*"]
    assert any(int(r[1]) & 0x10 for r in unplaced), "unplaced reads with 0x10"
    assert any(int(r[3]) > 0 for r in unplaced), "unplaced reads with POS > 0"
    assert any(int(r[1]) & 0x4 and r[2] != "*" for r in recs), "placed unmapped reads"
    assert sum(f & 0x100 != 0 for f in flags) > 100 and sum(f & 0x800 != 0 for f in flags) > 100
    assert any(len(r[9]) > 70_000 for r in recs), "records longer than a BGZF block (SEQ)"
    assert any(len("\t".join(r)) > 200_000 and "ZB:B:i," in "\t".join(r) for r in recs), "huge B arrays"
    names = {r[0] for r in recs}
    assert len(set(gen.E4_NAMES) & names) > 20, "natural-sort trap names (E4 list)"
    assert any(n.startswith("r0") for n in names), "leading-zero names"
    xt_types = {t[3] for r in recs for t in r[11:] if t.startswith("XT:")}
    assert xt_types == set("AZHifB"), f"XT types present: {xt_types}"
    assert sum(not any(t.startswith("XT:") for t in r[11:]) for r in recs) > 100, "records missing XT"
    tags = {t[:2] for r in recs for t in r[11:]}
    assert {"RG", "MC", "CB", "MI"} <= tags
    assert any(t.endswith("/A") for r in recs for t in r[11:] if t.startswith("MI:"))
    assert any(c in r[5] for r in recs for c in "HS"), "clipped CIGARs"


def test_mate_information_is_consistent(inputs):
    """Every paired record whose mate is flagged mapped has MC equal to the
    mate's CIGAR, PNEXT equal to the mate's POS and 0x20 equal to its 0x10."""
    recs = _records(open(inputs.sam("main")).read())
    primaries = {}
    count = Counter()
    for r in recs:
        f = int(r[1])
        if f & 0x1 and not f & 0x900:
            primaries[(r[0], f & 0xC0)] = r
            count[(r[0], f & 0xC0)] += 1
    checked = 0
    for r in recs:
        f = int(r[1])
        if not f & 0x1:
            continue
        mate_key = (r[0], 0xC0 ^ (f & 0xC0))
        if count[mate_key] != 1 or count[(r[0], f & 0xC0)] != 1:
            continue  # trap names may repeat across templates; those are ambiguous here
        mate = primaries[mate_key]
        mf = int(mate[1])
        assert bool(f & 0x8) == bool(mf & 0x4), f"0x8 disagrees with mate: {r[:9]} / {mate[:9]}"
        assert bool(f & 0x20) == bool(mf & 0x10), f"0x20 disagrees with mate: {r[:9]} / {mate[:9]}"
        if not f & 0x8:
            mc = [t[5:] for t in r[11:] if t.startswith("MC:Z:")]
            assert mc == [mate[5]], f"MC {mc} != mate CIGAR {mate[5]}: {r[:9]}"
            assert r[7] == mate[3], f"PNEXT {r[7]} != mate POS {mate[3]}"
            checked += 1
    assert checked > 10_000


def test_many_refs_and_headers(inputs):
    text = open(inputs.sam("manyrefs")).read()
    assert sum(line.startswith("@SQ\t") for line in text.splitlines()) == 3000
    assert not text.startswith("@HD"), "manyrefs has no @HD line"
    v15 = open(inputs.sam("hdr_v15")).read()
    assert v15.startswith("@HD\tVN:1.5\tSS:coordinate:foo\tGO:query\tSO:queryname\tZZ:keep\n")
    assert "@PG\tID:cow\tPN:cow\tPP:moose\n@CO" in v15, "@CO after the @PG chain"
