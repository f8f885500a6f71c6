//! Every command's option table and parser: `alnsort sort` (`sort`, `sort_args`), `alnsort merge` (`merge`), duplicate marking (`markdup`; samtools markdup's shared marking options in `samtools_marking`), `alnsort markdup`, `fixmate`, `index`, `verify` (`samtools_markdup`, `fixmate`, `index`, `verify`), the QC reports (`qc`), the stage subcommands (`stage`), Picard's MarkDuplicates (`picard`), sizes (`memsize`), and what is generated from the tables (`generate`: help, man page, completions).

pub mod columnar;
pub mod fixmate;
pub mod generate;
pub mod index;
pub mod markdup;
pub mod memsize;
pub mod merge;
pub mod picard;
pub mod qc;
pub mod samtools_markdup;
pub mod samtools_marking;
pub mod sort;
pub mod sort_args;
pub mod stage;
pub mod table;
pub mod verify;
