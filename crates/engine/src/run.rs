//! The runs of the commands that write records: `alnsort sort` (`sort`), `alnsort merge` (`merge`), `alnsort MarkDuplicates` (`mark_in_order`), and what each run may use (`resources`: the thread pool and the memory budget; `tmp_space`: the temporary space, checked at the start).

pub mod fixmate;
pub mod index;
pub mod mark_in_order;
pub mod merge;
pub mod resources;
pub mod resume;
pub mod samtools_markdup;
pub mod sort;
pub mod sort_samtools;
pub mod tmp_space;
pub mod verify;
