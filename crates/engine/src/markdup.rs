//! Duplicate marking riding along a run: read ends taken on the read jobs (`alnsort_markdup::extract`) with the input ordinal the sorter carries (`ordinal`), the marker fed in input order (`marker`), several inputs decided in Picard's merge order (`inputs`), the decision applied to the output (`decisions`) and the metrics file (`metrics`).

pub mod decisions;
pub mod inputs;
pub mod marker;
pub mod metrics;
pub mod ordinal;
