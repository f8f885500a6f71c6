//! The distributed sort's stages as library calls, for the
//! Python module `alnsort.stages`, the `alnsort split|sample|map|reduce|
//! assemble` subcommands and any workflow manager:
//!
//! 1. [`plan::split`]: cut the inputs into splits (record-start virtual offsets:
//!    the header's end, proven; the others guessed, `alnsort_bam::split`).
//! 2. [`plan::sample`]: sort keys with their tie-break (split, record virtual
//!    offset), drawn from a few evenly spaced stretches of one split.
//! 3. [`plan::splitters`]: R - 1 skew-safe range splitters from all samples.
//! 4. [`sort::map`]: one split read, keyed, sorted, cut into R framed blocks;
//!    reports the proven end of the split (the offset of the first record
//!    at or past its end), which the driver checks against the next
//!    split's start (repair: run the next map again from the proven end).
//! 5. [`sort::reduce`]: one range's blocks (in split order) merged into a
//!    headerless, EOF-less part, and its part index when asked.
//! 6. [`sort::assemble`]: header + parts in range order + one EOF block, the
//!    index merged from the part indexes; or a directory of complete,
//!    individually indexed files (sharded).
//!
//! Options are those of `alnsort sort` (the order, `-l`, `-O`,
//! `--write-index`, `--no-PG`, `-@`, `--max-memory`, `-T`), given as the
//! argument vector that command would take, without `-o` and the input:
//! one parser, one meaning, the same messages. assemble(reduce(map(...)))
//! over any splits and partitions holds the records of `alnsort sort`,
//! in its order, with its header.
//!
//! Several inputs (lanes) are sorted together as `alnsort sort IN1 IN2
//! ...` sorts them: their headers merged as `samtools merge` merges them
//! (`alnsort_bam::header_merge`, the merged header is the output's), each
//! record translated into the merged header's terms (reference ids, `RG`
//! and `PG` tags) before it is keyed, and records of equal sort keys in
//! the order of the coordinate merge of the inputs that `alnsort sort`
//! sorts stably. That order is (coordinate merge key's running maximum in
//! the record's input, input, position in the input), see [`plan::InputTranslations`]:
//! the maps append that running maximum to every key, [`plan::reach`] gives the
//! maximum of a split, and a map is told the largest reach of the earlier
//! splits of its input (`prior`). Only BAM inputs can be split (a SAM input
//! is refused).
//!
//! The distributed sort's stages as library calls: the plan (`plan`: split, sample, splitters, reach and the plumbing every task shares), the sort's tasks (`sort`: map, reduce, assemble), duplicate marking's tasks (`markdup`), and the stage subcommands with their files and JSON (`commands`).

pub mod commands;
pub mod markdup;
pub mod plan;
pub mod sort;
