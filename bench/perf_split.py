#!/usr/bin/env python3
"""Splits a `perf record` profile's samples into inflate, deflate and the
rest (by symbol), for comparing sorters that share libdeflate (issue 22).

    bench/perf_split.py PERF.DATA [CPU_SECONDS]

Prints each category's share of the samples and, given the process's CPU
seconds (user+sys from /usr/bin/time), its seconds. The categories are
assigned by symbol name: libdeflate's decompressor and compressor
functions, the kernel, memmove/memset, the allocator, the sort, the
record decode and key, the merge and output copies; anything else is
"other" (listed with --other)."""
import re
import subprocess
import sys

RULES = [
    # (category, regex on the symbol)
    ("inflate", r"deflate_decompress|build_decode_table|libdeflate_deflate_decompress|libdeflate_gzip_decompress|inflate"),
    ("deflate", r"deflate_compress|deflate_flush_block|build_tree|deflate_make_huffman|deflate_precompute|heap_sort|compute_length_counts|deflate_choose|deflate_write|deflate_optimize|gen_codewords|sort_symbols|make_canonical|deflate_init|deflate_begin|deflate_finish|lz_hash|ht_matchfinder|hc_matchfinder|bt_matchfinder|bt_right_child|deflate_near_optimal|deflate_set_costs|libdeflate_deflate_compress|libdeflate_alloc_compressor|choose_literal"),
    ("crc32", r"crc32"),
    ("sync/threads", r"crossbeam|rayon|futex|pthread|parking_lot|std::sync|sched_yield|Condvar|Mutex|spin|alnsort_pipeline|fgumi_pipeline_core|park|clock_gettime|Timespec|^syscall$|deadlock"),
    ("kernel", r"^\[k\]"),
    ("memcpy/memset", r"memmove|memcpy|memset|copy_nonoverlapping"),
    ("allocator", r"malloc|_int_free|cfree|free_perturb|realloc|calloc|(^|[^a-z])mi_|(^|[^a-z])je_|sdallocx|arena_|tcache|alloc::raw_vec|__rust_alloc|__rust_dealloc|unlink_chunk|sysmalloc|malloc_consolidate"),
    ("sort (in memory)", r"voracious|ska_|rollercoaster|radix|sort_unstable|quicksort|insertion_sort|heapsort|partition::|merge_sort|sort::shared|slice::sort|ipnsort|smallsort|driftsort|Batch::sort|pdqsort|choose_pivot|bidirectional_merge|stable::|unstable::"),
    ("merge (loser tree, partitions)", r"sort::merge|MergeBatch|loser|LoserTree|Cursor|merge_partition|Merged|Chunk::record|kmerge|heap"),
    ("decode/validate/key", r"extract_|key_inline|validate|aux::|Aux|Fields|keys::|KeyEncoder|htslib|reader::|Decoder|record_starts|cigar|Cigar|put_coordinate|put_name|natural|parse|scanner|Scanner|bam::|noodles|RecordBuf|record::"),
    ("arena copy/push", r"SegmentedBuf|segmented|inline::|Batch::|append_from|try_push|push_batch|Sorter::|batch::|prepare"),
    ("output serialize/pack", r"fgumi_pipeline_io|fgumi_bgzf|writer::|Writer|ChunkRecords|write_units|BlockWriter|encode_block|Units|bgzf::|output::|serialize|write"),
]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show_other = "--other" in sys.argv
    data = args[0]
    cpu = float(args[1]) if len(args) > 1 else None
    out = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--sort", "sym", "--stdio", "-g", "none",
         "--percent-limit", "0"],
        capture_output=True, text=True, check=True).stdout
    cats = {c: 0.0 for c, _ in RULES}
    cats["other"] = 0.0
    other = []
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\[.\])\s+(.*)$", line)
        if not m:
            continue
        pct, kind, sym = float(m.group(1)), m.group(2), m.group(3).strip()
        name = "[k]" if kind == "[k]" else sym
        for c, rx in RULES:
            if re.search(rx, name):
                cats[c] += pct
                break
        else:
            cats["other"] += pct
            other.append((pct, sym))
    total = sum(cats.values())
    for c, p in cats.items():
        secs = f"{cpu * p / total:7.2f} s" if cpu else ""
        print(f"{c:32s} {p:6.2f}% {secs}")
    if show_other:
        for p, s in sorted(other, reverse=True)[:40]:
            print(f"   other {p:6.2f}% {s}")


if __name__ == "__main__":
    main()
